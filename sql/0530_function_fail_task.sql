-- fail_task: a v1 worker reports a handler failure. While attempts remain the task is queued
-- again and its message becomes visible after base_delay * 2^(attempts - 1) seconds; the last
-- failure fails the step and the run, and terminalizes every unfinished task of the run.
-- A task that is no longer started is left as it is and returned unchanged.
-- Locks: run (for update) -> step_states by step_slug -> the task -> messages.
-- Refuses: DR014 unknown run or task · DR010 a v2 run.
-- Writes: step_tasks, its message (vt on retry, archive on the last failure), step_states and
--         runs on the last failure.
create function engine.fail_task(run_id uuid, step_slug text, task_index integer, error_message text)
returns engine.step_tasks
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_run engine.runs;
  v_task engine.step_tasks;
  v_max_attempts integer;
  v_base_delay integer;
begin
  v_run := engine._v1_report_run(fail_task.run_id, 'fail_task');

  perform
    from engine.step_states as ss
   where ss.run_id = fail_task.run_id
   order by ss.step_slug
     for update;

  v_task := engine._v1_report_task(fail_task.run_id, fail_task.step_slug, fail_task.task_index);
  if v_run.status <> 'started' or v_task.status <> 'started' then
    return v_task;
  end if;

  select coalesce(s.max_attempts, f.max_attempts), coalesce(s.base_delay, f.base_delay)
    into strict v_max_attempts, v_base_delay
    from engine.steps as s
    join engine.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_task.attempts_count < v_max_attempts then
    update engine.step_tasks as t
       set status = 'queued', error_message = fail_task.error_message, queued_at = v_now
     where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug
       and t.task_index = fail_task.task_index
    returning t.* into v_task;
    perform pgmq.set_vt(
      v_task.queue_name, v_task.message_id,
      v_now + pg_catalog.make_interval(
        secs => v_base_delay * pg_catalog.power(2, v_task.attempts_count - 1)));
    return v_task;
  end if;

  update engine.step_tasks as t
     set status = 'failed', error_message = fail_task.error_message, failed_at = v_now
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
  returning t.* into v_task;
  perform pgmq.archive(v_task.queue_name, v_task.message_id);

  update engine.step_states as ss
     set status = 'failed', failed_at = v_now, error_message = fail_task.error_message
   where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug;

  perform engine._fail_run(fail_task.run_id, v_now);
  return v_task;
end;
$$;
