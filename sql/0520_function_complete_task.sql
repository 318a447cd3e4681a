-- complete_task: a v1 worker reports a handler result; the cascade starts dependents whose
-- dependencies are now all completed and completes the run after its last step.
-- The output is stored exactly as given (JSON null, 0, false, "", [] and {} included).
-- A task that is no longer started (its run failed meanwhile, or it was completed or
-- requeued) is left as it is and returned unchanged.
-- Locks: run (for update) -> step_states by step_slug -> the task -> its message.
-- Refuses: DR014 unknown run or task · DR009 output is SQL NULL · DR010 a v2 run.
-- Writes: step_tasks (completed), archives its message, step_states (completed; dependents'
--         remaining_deps - 1), runs (remaining_steps - 1; completed with the leaf outputs),
--         dependents' tasks and messages.
create function engine.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb)
returns engine.step_tasks
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_run engine.runs;
  v_task engine.step_tasks;
begin
  if complete_task.output is null then
    raise exception 'run %, step %: output is SQL NULL', complete_task.run_id, complete_task.step_slug
      using errcode = 'DR009', hint = 'Pass ''null''::jsonb for a JSON null result.';
  end if;

  v_run := engine._v1_report_run(complete_task.run_id, 'complete_task');

  perform
    from engine.step_states as ss
   where ss.run_id = complete_task.run_id
     and (ss.step_slug = complete_task.step_slug
          or ss.step_slug in (select d.step_slug from engine.deps as d
                               where d.flow_slug = v_run.flow_slug
                                 and d.dep_slug = complete_task.step_slug))
   order by ss.step_slug
     for update;

  v_task := engine._v1_report_task(complete_task.run_id, complete_task.step_slug, complete_task.task_index);
  if v_run.status <> 'started' or v_task.status <> 'started' then
    return v_task;
  end if;

  update engine.step_tasks as t
     set status = 'completed', output = complete_task.output, completed_at = v_now
   where t.run_id = complete_task.run_id and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
  returning t.* into v_task;

  perform pgmq.archive(v_task.queue_name, v_task.message_id);

  update engine.step_states as ss
     set status = 'completed', completed_at = v_now
   where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug;

  update engine.step_states as ss
     set remaining_deps = ss.remaining_deps - 1
   where ss.run_id = complete_task.run_id
     and ss.status = 'created'
     and ss.step_slug in (select d.step_slug from engine.deps as d
                           where d.flow_slug = v_run.flow_slug
                             and d.dep_slug = complete_task.step_slug);

  update engine.runs as r
     set remaining_steps = r.remaining_steps - 1
   where r.run_id = complete_task.run_id
  returning r.* into v_run;

  perform engine._start_ready_steps(complete_task.run_id, v_now);

  if v_run.remaining_steps = 0 then
    update engine.runs as r
       set status = 'completed',
           completed_at = v_now,
           output = (select coalesce(pg_catalog.jsonb_object_agg(t.step_slug, t.output), '{}'::jsonb)
                       from engine.step_tasks as t
                      where t.run_id = complete_task.run_id
                        and not exists (select from engine.deps as d
                                         where d.flow_slug = t.flow_slug
                                           and d.dep_slug = t.step_slug))
     where r.run_id = complete_task.run_id;
  end if;
  return v_task;
end;
$$;
