-- start_flow: start a v1 run of a flow; its root steps are queued before it returns.
-- Locks: definition (the flow row for share) -> the new run -> its step_states.
-- Refuses: DR014 unknown flow · DR009 input is SQL NULL (JSON null is fine).
-- Writes: runs, step_states (one per step), step_tasks and messages of the root steps.
create function engine.start_flow(flow_slug text, input jsonb)
returns uuid
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_run_id uuid := pg_catalog.gen_random_uuid();
  v_steps integer;
begin
  perform from engine.flows as f where f.flow_slug = start_flow.flow_slug for share;
  if not found then
    raise exception 'unknown flow %', pg_catalog.quote_nullable(start_flow.flow_slug)
      using errcode = 'DR014';
  end if;
  if start_flow.input is null then
    raise exception 'flow %: run input is SQL NULL', start_flow.flow_slug
      using errcode = 'DR009', hint = 'Pass ''null''::jsonb for a JSON null input.';
  end if;

  select pg_catalog.count(*) into v_steps
    from engine.steps as s where s.flow_slug = start_flow.flow_slug;

  insert into engine.runs (run_id, flow_slug, status, input, remaining_steps, started_at)
  values (v_run_id, start_flow.flow_slug, 'started', start_flow.input, v_steps, v_now);

  insert into engine.step_states (run_id, step_slug, flow_slug, status, remaining_deps, created_at)
  select v_run_id, s.step_slug, s.flow_slug, 'created', s.deps_count, v_now
    from engine.steps as s
   where s.flow_slug = start_flow.flow_slug
   order by s.step_slug;

  perform engine._start_ready_steps(v_run_id, v_now);

  if v_steps = 0 then
    update engine.runs as r
       set status = 'completed', output = '{}'::jsonb, completed_at = v_now
     where r.run_id = v_run_id;
  end if;
  return v_run_id;
end;
$$;
