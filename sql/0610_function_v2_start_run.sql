-- v2_start_run: admit and start a Dirty Runs v2 run of an A -> B flow.
-- Locks: definition (the flow row for share) -> the new run -> its work row -> step states.
-- Refuses, before any run, work row, task or message exists:
--   DR014 unknown flow · DR001 a shape or option outside the envelope (v2_limits()):
--   not exactly two steps, not one root A with B depending on A only, effective max_attempts
--   not 1, effective timeout outside 1..900 s, A's start_delay not 0, B's outside 0..3600 s
--   · DR009 input is SQL NULL · DR002 input over 65 536 bytes.
-- Writes, in one transaction: runs (protocol 'v2', definition_hash), run_work (0/0, clean),
--   step_states (A started, B created), A's task (queued) and A's message in A's route.
--   B has no task and no message. Wakes the workers waiting on A's queue (engine_queue_<queue>).
create function engine.v2_start_run(flow_slug text, input jsonb)
returns uuid
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_limits engine.v2_envelope := engine._v2_envelope();
  v_now timestamptz := engine._now();
  v_run_id uuid := pg_catalog.gen_random_uuid();
  v_steps integer;
  v_a record;
  v_b record;
  v_bytes integer;
  v_message_id bigint;
begin
  perform from engine.flows as f where f.flow_slug = v2_start_run.flow_slug for share;
  if not found then
    raise exception 'unknown flow %', pg_catalog.quote_nullable(v2_start_run.flow_slug)
      using errcode = 'DR014';
  end if;
  perform engine._hook('start.after_definition_lock');

  -- the whole envelope, before anything is written
  select pg_catalog.count(*) into v_steps from engine.steps as s where s.flow_slug = v2_start_run.flow_slug;
  if v_steps <> v_limits.steps then
    raise exception 'flow % has % step(s); a v2 flow has exactly % (A -> B)',
      v2_start_run.flow_slug, v_steps, v_limits.steps
      using errcode = 'DR001';
  end if;
  select s.step_slug, s.queue_name, coalesce(s.max_attempts, f.max_attempts) as max_attempts,
         coalesce(s.timeout, f.timeout) as timeout, coalesce(s.start_delay, 0) as start_delay
    into v_a
    from engine.steps as s join engine.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v2_start_run.flow_slug and s.deps_count = 0;
  select s.step_slug, s.queue_name, coalesce(s.max_attempts, f.max_attempts) as max_attempts,
         coalesce(s.timeout, f.timeout) as timeout, coalesce(s.start_delay, 0) as start_delay,
         (select pg_catalog.array_agg(d.dep_slug) from engine.deps as d
           where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug) as deps
    into v_b
    from engine.steps as s join engine.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v2_start_run.flow_slug and s.deps_count > 0;
  if v_a.step_slug is null or v_b.step_slug is null or v_b.deps is distinct from array[v_a.step_slug] then
    raise exception 'flow % is not A -> B: one root step A and one step B that depends on A only',
      v2_start_run.flow_slug
      using errcode = 'DR001';
  end if;
  if v_a.max_attempts <> v_limits.max_attempts
     or v_b.max_attempts <> v_limits.max_attempts then
    raise exception 'flow %: effective max_attempts must be % (%: %, %: %)', v2_start_run.flow_slug,
      v_limits.max_attempts, v_a.step_slug, v_a.max_attempts, v_b.step_slug, v_b.max_attempts
      using errcode = 'DR001';
  end if;
  if least(v_a.timeout, v_b.timeout) < v_limits.timeout_min_seconds
     or greatest(v_a.timeout, v_b.timeout) > v_limits.timeout_max_seconds then
    raise exception 'flow %: effective timeout must be within % .. % s (%: %, %: %)',
      v2_start_run.flow_slug, v_limits.timeout_min_seconds, v_limits.timeout_max_seconds,
      v_a.step_slug, v_a.timeout, v_b.step_slug, v_b.timeout
      using errcode = 'DR001';
  end if;
  if v_a.start_delay <> v_limits.start_delay_a_seconds then
    raise exception 'flow %: root step % must have start_delay %, not %', v2_start_run.flow_slug,
      v_a.step_slug, v_limits.start_delay_a_seconds, v_a.start_delay
      using errcode = 'DR001';
  end if;
  if v_b.start_delay not between v_limits.start_delay_b_min_seconds
                             and v_limits.start_delay_b_max_seconds then
    raise exception 'flow %: step % start_delay % is outside % .. % s', v2_start_run.flow_slug,
      v_b.step_slug, v_b.start_delay, v_limits.start_delay_b_min_seconds,
      v_limits.start_delay_b_max_seconds
      using errcode = 'DR001';
  end if;
  if v2_start_run.input is null then
    raise exception 'flow %: run input is SQL NULL', v2_start_run.flow_slug
      using errcode = 'DR009', hint = 'Pass ''null''::jsonb for a JSON null input.';
  end if;
  v_bytes := pg_catalog.octet_length(v2_start_run.input::text);
  if v_bytes > v_limits.input_max_bytes then
    raise exception 'flow %: run input has % bytes, more than %', v2_start_run.flow_slug, v_bytes,
      v_limits.input_max_bytes
      using errcode = 'DR002';
  end if;

  insert into engine.runs (run_id, flow_slug, status, input, remaining_steps, started_at, protocol,
                           definition_hash)
  values (v_run_id, v2_start_run.flow_slug, 'started', v2_start_run.input, v_steps, v_now, 'v2',
          (select f.definition_hash from engine.flows as f where f.flow_slug = v2_start_run.flow_slug));
  insert into engine.run_work (run_id) values (v_run_id);
  insert into engine.step_states (run_id, step_slug, flow_slug, status, remaining_deps, created_at,
                                  started_at)
  values (v_run_id, v_a.step_slug, v2_start_run.flow_slug, 'started', 0, v_now, v_now),
         (v_run_id, v_b.step_slug, v2_start_run.flow_slug, 'created', 1, v_now, null);

  select m.msg_id into strict v_message_id
    from pgmq.send(v_a.queue_name,
                   engine._task_message('v2', v_run_id, v_a.step_slug, 0),
                   v_now) as m (msg_id);
  insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, queue_name,
                                 message_id, queued_at)
  values (v_run_id, v_a.step_slug, v2_start_run.flow_slug, 0, 'queued', v_a.queue_name,
          v_message_id, v_now);
  perform engine._notify_listeners('engine_queue_' || v_a.queue_name);
  return v_run_id;
end;
$$;
