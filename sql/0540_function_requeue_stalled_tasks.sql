-- requeue_stalled_tasks: recover v1 tasks whose worker went silent. A started task whose
-- started_at + effective step timeout + 2 s has passed is queued again and its message made
-- visible now; a stalled task that has used its last attempt fails with its run instead.
-- Tasks of v2 runs are never touched (their recovery is v2_take_over).
-- Locks: per task, run (for update) -> step_states by step_slug -> the task -> its message.
-- Writes: step_tasks, message vt (requeue) or archive (last attempt), step_states and runs on
--         the last attempt.
-- Returns the number of tasks queued again.
create function engine.requeue_stalled_tasks()
returns integer
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_candidate record;
  v_task engine.step_tasks;
  v_requeued integer := 0;
  v_error text;
begin
  for v_candidate in
    select t.run_id, t.step_slug, t.task_index,
           coalesce(s.timeout, f.timeout) as timeout,
           coalesce(s.max_attempts, f.max_attempts) as max_attempts
      from engine.step_tasks as t
      join engine.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join engine.flows as f on f.flow_slug = t.flow_slug
      join engine.runs as r on r.run_id = t.run_id and r.protocol = 'v1'
     where t.status = 'started'
       and t.started_at + pg_catalog.make_interval(secs => coalesce(s.timeout, f.timeout) + 2) < v_now
     order by t.run_id, t.step_slug, t.task_index
  loop
    perform from engine.runs as r
     where r.run_id = v_candidate.run_id and r.status = 'started'
       for update;
    continue when not found;
    perform from engine.step_states as ss
     where ss.run_id = v_candidate.run_id order by ss.step_slug for update;
    select t.* into v_task
      from engine.step_tasks as t
     where t.run_id = v_candidate.run_id and t.step_slug = v_candidate.step_slug
       and t.task_index = v_candidate.task_index
       and t.status = 'started'
       and t.started_at + pg_catalog.make_interval(secs => v_candidate.timeout + 2) < v_now
       for update;
    continue when not found;

    v_error := pg_catalog.format('stalled: no result within the step timeout of %s s + 2 s',
                                 v_candidate.timeout);
    if v_task.attempts_count < v_candidate.max_attempts then
      update engine.step_tasks as t
         set status = 'queued', queued_at = v_now, error_message = v_error
       where t.run_id = v_task.run_id and t.step_slug = v_task.step_slug
         and t.task_index = v_task.task_index;
      perform pgmq.set_vt(v_task.queue_name, v_task.message_id, v_now);
      v_requeued := v_requeued + 1;
    else
      update engine.step_tasks as t
         set status = 'failed', failed_at = v_now, error_message = v_error
       where t.run_id = v_task.run_id and t.step_slug = v_task.step_slug
         and t.task_index = v_task.task_index;
      perform pgmq.archive(v_task.queue_name, v_task.message_id);
      update engine.step_states as ss
         set status = 'failed', failed_at = v_now, error_message = v_error
       where ss.run_id = v_task.run_id and ss.step_slug = v_task.step_slug;
      perform engine._fail_run(v_task.run_id, v_now);
    end if;
  end loop;
  return v_requeued;
end;
$$;
