-- _fail_run: fail a started run and terminalize everything unfinished in it, so that no
-- sibling task is left queued or started on a failed run.
-- Locks: (the caller holds the run) step_states by step_slug -> step_tasks by
-- (step_slug, task_index) -> their messages by message_id.
-- Writes: runs (failed), step_states created/started -> cancelled, step_tasks queued/started
-- -> cancelled, and archives the cancelled tasks' messages.
create function engine._fail_run(run_id uuid, now timestamptz)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_task record;
begin
  update engine.runs as r
     set status = 'failed', failed_at = _fail_run.now
   where r.run_id = _fail_run.run_id and r.status = 'started';

  perform
    from engine.step_states as ss
   where ss.run_id = _fail_run.run_id and ss.status in ('created', 'started')
   order by ss.step_slug
     for update;
  update engine.step_states as ss
     set status = 'cancelled', failed_at = _fail_run.now
   where ss.run_id = _fail_run.run_id and ss.status in ('created', 'started');

  perform
    from engine.step_tasks as t
   where t.run_id = _fail_run.run_id and t.status in ('queued', 'started')
   order by t.step_slug, t.task_index
     for update;
  for v_task in
    select t.queue_name, t.message_id
      from engine.step_tasks as t
     where t.run_id = _fail_run.run_id and t.status in ('queued', 'started')
       and t.message_id is not null
     order by t.queue_name, t.message_id
  loop
    perform pgmq.archive(v_task.queue_name, v_task.message_id);
  end loop;
  update engine.step_tasks as t
     set status = 'cancelled', failed_at = _fail_run.now
   where t.run_id = _fail_run.run_id and t.status in ('queued', 'started');
end;
$$;
