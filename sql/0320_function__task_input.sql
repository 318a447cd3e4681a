-- _task_input: handler input of a task. A root step gets the run input; a dependent step gets
-- {"run": <run input>, "<dep slug>": <dep output>, ...}.
-- Reads only; the caller holds the locks.
create function engine._task_input(run_id uuid, step_slug text)
returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select case
    when s.deps_count = 0 then r.input
    else pg_catalog.jsonb_build_object('run', r.input) operator(pg_catalog.||) coalesce(
      (select pg_catalog.jsonb_object_agg(d.dep_slug, t.output)
         from engine.deps as d
         join engine.step_tasks as t
           on t.run_id = r.run_id and t.step_slug = d.dep_slug and t.task_index = 0
        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug),
      '{}'::jsonb)
  end
  from engine.runs as r
  join engine.steps as s on s.flow_slug = r.flow_slug
  where r.run_id = _task_input.run_id and s.step_slug = _task_input.step_slug;
$$;
