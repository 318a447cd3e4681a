-- _start_ready_steps: start every created step of a run whose dependencies have all completed.
-- Each such step state becomes started, its single task is created and its message is sent to
-- the step's stored route, delayed by the step's start_delay; the task snapshots the pair
-- (queue_name, message_id) it was sent as.
-- Locks: the run's step_states in step_slug order (the caller already holds the run).
-- Writes: step_states (started), step_tasks (queued, with message_id), one PGMQ message each.
create function engine._start_ready_steps(run_id uuid, now timestamptz)
returns integer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_step record;
  v_message_id bigint;
  v_started integer := 0;
begin
  for v_step in
    select ss.step_slug, ss.flow_slug, s.queue_name, coalesce(s.start_delay, 0) as start_delay
      from engine.step_states as ss
      join engine.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
     where ss.run_id = _start_ready_steps.run_id
       and ss.status = 'created'
       and ss.remaining_deps = 0
     order by ss.step_slug
       for update of ss
  loop
    update engine.step_states as ss
       set status = 'started', started_at = _start_ready_steps.now
     where ss.run_id = _start_ready_steps.run_id and ss.step_slug = v_step.step_slug;

    select m.msg_id into strict v_message_id
      from pgmq.send(
        v_step.queue_name,
        engine._task_message('v1', _start_ready_steps.run_id, v_step.step_slug, 0),
        _start_ready_steps.now + pg_catalog.make_interval(secs => v_step.start_delay)
      ) as m (msg_id);

    insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, queue_name,
                                   message_id, queued_at)
    values (_start_ready_steps.run_id, v_step.step_slug, v_step.flow_slug, 0, 'queued',
            v_step.queue_name, v_message_id, _start_ready_steps.now);

    v_started := v_started + 1;
  end loop;
  return v_started;
end;
$$;
