-- start_tasks: a v1 worker claims the queued tasks behind the messages it has read.
-- Only rows that the guarded UPDATE ... RETURNING actually changed are granted, so two
-- sessions claiming one message get one winner. Each winner's message becomes invisible
-- until the effective step timeout + 2 s. Messages match on the task's snapshot
-- (queue_name, message_id) only, so an equal id in another queue never matches. Unknown
-- message ids and tasks of v2 runs are ignored (no grant, no write). Queue names compare
-- lower-cased, as in PGMQ.
-- Locks: candidate step_tasks by (run_id, step_slug, task_index) -> their messages.
-- Writes: step_tasks (started, attempts_count + 1), the winners' message vt.
create function engine.start_tasks(queue_name text, message_ids bigint[])
returns setof engine.task_grant
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_task record;
begin
  for v_task in
    update engine.step_tasks as t
       set status = 'started',
           attempts_count = t.attempts_count + 1,
           started_at = v_now
      from (select c.run_id, c.step_slug, c.task_index
              from engine.step_tasks as c
              join engine.runs as r on r.run_id = c.run_id
             where c.queue_name = pg_catalog.lower(start_tasks.queue_name)
               and c.message_id = any (start_tasks.message_ids)
               and c.status = 'queued'
               and r.status = 'started'
               and r.protocol = 'v1'
             order by c.run_id, c.step_slug, c.task_index
               for update of c) as candidate,
           engine.steps as s,
           engine.flows as f
     where t.run_id = candidate.run_id
       and t.step_slug = candidate.step_slug
       and t.task_index = candidate.task_index
       and t.status = 'queued'
       and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
       and f.flow_slug = t.flow_slug
    returning t.run_id, t.step_slug, t.task_index, t.queue_name, t.message_id,
              coalesce(s.timeout, f.timeout) as timeout
  loop
    perform pgmq.set_vt(v_task.queue_name, v_task.message_id,
                        v_now + pg_catalog.make_interval(secs => v_task.timeout + 2));
    return next row(v_task.run_id, v_task.step_slug, v_task.task_index, v_task.queue_name,
                    v_task.message_id, engine._task_input(v_task.run_id, v_task.step_slug)
                   )::engine.task_grant;
  end loop;
end;
$$;
