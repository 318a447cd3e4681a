-- 0005_v2_fast_paths.sql: the live definition hash is cached in engine.flows.definition_hash
-- and kept current by triggers on flows, steps and deps (direct writes included), so
-- v2_start_run, v2_claim and v2_reconcile compare one column instead of recomputing the hash
-- on every call. Behaviour is unchanged: a definition changed behind the engine's back is
-- still refused with DR005.

alter table engine.flows add column definition_hash text;


-- ----- 0370_function__definition_hash.sql
-- _definition_hash: the identity of a flow's live definition (options, mode, every step with
-- its position, options, route and dependencies). A v2 run records it at start; claims and
-- reconciliation refuse (DR005) when the live definition no longer matches. The value is
-- cached in engine.flows.definition_hash by triggers (_refresh_definition_hash).
create or replace function engine._definition_hash(flow_slug text)
returns text
language sql stable
set search_path = ''
as $$
  select pg_catalog.md5(pg_catalog.jsonb_build_array(
    (select pg_catalog.jsonb_build_array(f.flow_slug, f.max_attempts, f.base_delay, f.timeout,
                                         f.queue_mode)
       from engine.flows as f where f.flow_slug = _definition_hash.flow_slug),
    (select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(
              s.step_slug, s.step_index, s.max_attempts, s.base_delay, s.timeout, s.start_delay,
              s.queue_name,
              (select coalesce(pg_catalog.jsonb_agg(d.dep_slug order by d.dep_slug), '[]'::jsonb)
                 from engine.deps as d
                where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug))
              order by s.step_index), '[]'::jsonb)
       from engine.steps as s where s.flow_slug = _definition_hash.flow_slug)
  )::text);
$$;


-- ----- 0372_function__refresh_definition_hash.sql
-- _refresh_definition_hash: trigger function on flows, steps and deps. Recomputes the cached
-- definition hash of every flow a changed row belongs to, in the same transaction, so that
-- claims and reconciliation compare against the live definition without recomputing it.
create or replace function engine._refresh_definition_hash()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if tg_op in ('INSERT', 'UPDATE') then
    update engine.flows as f
       set definition_hash = engine._definition_hash(f.flow_slug)
     where f.flow_slug = new.flow_slug;
  end if;
  if tg_op = 'DELETE' or (tg_op = 'UPDATE' and old.flow_slug is distinct from new.flow_slug) then
    update engine.flows as f
       set definition_hash = engine._definition_hash(f.flow_slug)
     where f.flow_slug = old.flow_slug;
  end if;
  return null;
end;
$$;


-- ----- 0374_trigger_flows_refresh_definition_hash.sql
-- flows_refresh_definition_hash: a new flow, or new options or mode, refresh the cached hash.
create trigger flows_refresh_definition_hash
  after insert or update of flow_slug, max_attempts, base_delay, timeout, queue_mode on engine.flows
  for each row execute function engine._refresh_definition_hash();


-- ----- 0375_trigger_steps_refresh_definition_hash.sql
-- steps_refresh_definition_hash: any change to a flow's steps refreshes its cached hash.
create trigger steps_refresh_definition_hash
  after insert or update or delete on engine.steps
  for each row execute function engine._refresh_definition_hash();


-- ----- 0376_trigger_deps_refresh_definition_hash.sql
-- deps_refresh_definition_hash: any change to a flow's dependencies refreshes its cached hash.
create trigger deps_refresh_definition_hash
  after insert or update or delete on engine.deps
  for each row execute function engine._refresh_definition_hash();


-- ----- backfill the cache for existing flows
update engine.flows as f set definition_hash = engine._definition_hash(f.flow_slug);


-- ----- 0400_function_create_flow.sql
-- create_flow: define a flow (its options are its steps' defaults). A plain flow
-- (queue_mode 'flow') gets its queue lower(flow_slug) now; a step-queued flow ('step') gets a
-- private queue per step in add_step. Either way the flow reserves lower(flow_slug).
-- Locks: definition (the flow row: insert, or for update when it exists) -> the advisory lock
-- of its default queue name.
-- Refuses: DR001 invalid slug, default queue name over 47 characters, option out of range or
--          unknown queue_mode · DR016 the flow exists with different options or mode
--          (DR011 instead while a v2 run of the flow is not terminal)
--          · DR012 the default queue name is taken by another flow or by another PGMQ queue.
-- Writes: flows, the PGMQ queue lower(flow_slug) of a plain flow (when missing).
-- Defining the same flow again with identical options is a no-op that returns the row.
create or replace function engine.create_flow(
  flow_slug text,
  max_attempts integer default 3,
  base_delay integer default 1,
  timeout integer default 60,
  queue_mode text default 'flow'
) returns engine.flows
language plpgsql security definer
set search_path = ''
as $$
declare
  v_flow engine.flows;
begin
  if not engine._is_valid_slug(create_flow.flow_slug) then
    raise exception 'flow slug % is not a valid slug', pg_catalog.quote_nullable(create_flow.flow_slug)
      using errcode = 'DR001',
            hint = 'A slug matches ^[A-Za-z_][A-Za-z0-9_]*$ and has at most 128 characters.';
  end if;
  if pg_catalog.length(create_flow.flow_slug) > 47 then
    raise exception 'flow % reserves queue name %, which is longer than 47 characters',
      create_flow.flow_slug, pg_catalog.lower(create_flow.flow_slug)
      using errcode = 'DR001';
  end if;
  if create_flow.max_attempts is null or create_flow.max_attempts < 1
     or create_flow.base_delay is null or create_flow.base_delay < 0
     or create_flow.timeout is null or create_flow.timeout < 1 then
    raise exception 'flow %: options out of range (max_attempts %, base_delay %, timeout %)',
      create_flow.flow_slug, create_flow.max_attempts, create_flow.base_delay, create_flow.timeout
      using errcode = 'DR001',
            hint = 'max_attempts >= 1, base_delay >= 0, timeout >= 1 (seconds), none null.';
  end if;
  if create_flow.queue_mode is null or create_flow.queue_mode not in ('flow', 'step') then
    raise exception 'flow %: unknown queue_mode %', create_flow.flow_slug,
      pg_catalog.quote_nullable(create_flow.queue_mode)
      using errcode = 'DR001', hint = 'queue_mode is ''flow'' (one queue) or ''step'' (a queue per step).';
  end if;

  -- concurrent definitions of the same or a colliding name serialize here
  perform pg_catalog.pg_advisory_xact_lock(7100, pg_catalog.hashtext(pg_catalog.lower(create_flow.flow_slug)));
  select f.* into v_flow
    from engine.flows as f
   where f.flow_slug = create_flow.flow_slug
     for update;
  if found then
    if (v_flow.max_attempts, v_flow.base_delay, v_flow.timeout, v_flow.queue_mode)
       is distinct from (create_flow.max_attempts, create_flow.base_delay, create_flow.timeout,
                         create_flow.queue_mode) then
      perform engine._assert_definition_unlocked(create_flow.flow_slug, 'options');
      raise exception 'flow % already exists with different options', create_flow.flow_slug
        using errcode = 'DR016',
              detail = pg_catalog.format(
                'existing: max_attempts %s, base_delay %s, timeout %s, queue_mode %s; given: max_attempts %s, base_delay %s, timeout %s, queue_mode %s',
                v_flow.max_attempts, v_flow.base_delay, v_flow.timeout, v_flow.queue_mode,
                create_flow.max_attempts, create_flow.base_delay, create_flow.timeout,
                create_flow.queue_mode);
    end if;
    return v_flow;
  end if;

  perform engine._reserve_queue_name(create_flow.flow_slug, create_flow.flow_slug);

  insert into engine.flows as f (flow_slug, max_attempts, base_delay, timeout, queue_mode)
  values (create_flow.flow_slug, create_flow.max_attempts, create_flow.base_delay,
          create_flow.timeout, create_flow.queue_mode)
  returning f.* into v_flow;

  if v_flow.queue_mode = 'flow' then
    perform engine._ensure_queue(pg_catalog.lower(create_flow.flow_slug));
  end if;
  -- the row as the triggers left it (definition_hash is filled in after the insert)
  select f.* into strict v_flow from engine.flows as f where f.flow_slug = create_flow.flow_slug;
  return v_flow;
end;
$$;


-- ----- 0610_function_v2_start_run.sql
-- v2_start_run: admit and start a Dirty Runs v2 run of an A -> B flow.
-- Locks: definition (the flow row for share) -> the new run -> its work row -> step states.
-- Refuses, before any run, work row, task or message exists:
--   DR014 unknown flow · DR001 a shape or option outside the envelope (v2_limits()):
--   not exactly two steps, not one root A with B depending on A only, effective max_attempts
--   not 1, effective timeout outside 1..900 s, A's start_delay not 0, B's outside 0..3600 s
--   · DR009 input is SQL NULL · DR002 input over 65 536 bytes.
-- Writes, in one transaction: runs (protocol 'v2', definition_hash), run_work (0/0, clean),
--   step_states (A started, B created), A's task (queued) and A's message in A's route.
--   B has no task and no message.
create or replace function engine.v2_start_run(flow_slug text, input jsonb)
returns uuid
language plpgsql security definer
set search_path = ''
as $$
declare
  v_limits jsonb := engine.v2_limits();
  v_now timestamptz := pg_catalog.clock_timestamp();
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
  if v_steps <> (v_limits ->> 'steps')::integer then
    raise exception 'flow % has % step(s); a v2 flow has exactly % (A -> B)',
      v2_start_run.flow_slug, v_steps, v_limits ->> 'steps'
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
  if v_a.max_attempts <> (v_limits ->> 'max_attempts')::integer
     or v_b.max_attempts <> (v_limits ->> 'max_attempts')::integer then
    raise exception 'flow %: effective max_attempts must be % (%: %, %: %)', v2_start_run.flow_slug,
      v_limits ->> 'max_attempts', v_a.step_slug, v_a.max_attempts, v_b.step_slug, v_b.max_attempts
      using errcode = 'DR001';
  end if;
  if least(v_a.timeout, v_b.timeout) < (v_limits ->> 'timeout_min_seconds')::integer
     or greatest(v_a.timeout, v_b.timeout) > (v_limits ->> 'timeout_max_seconds')::integer then
    raise exception 'flow %: effective timeout must be within % .. % s (%: %, %: %)',
      v2_start_run.flow_slug, v_limits ->> 'timeout_min_seconds', v_limits ->> 'timeout_max_seconds',
      v_a.step_slug, v_a.timeout, v_b.step_slug, v_b.timeout
      using errcode = 'DR001';
  end if;
  if v_a.start_delay <> (v_limits ->> 'start_delay_a_seconds')::integer then
    raise exception 'flow %: root step % must have start_delay %, not %', v2_start_run.flow_slug,
      v_a.step_slug, v_limits ->> 'start_delay_a_seconds', v_a.start_delay
      using errcode = 'DR001';
  end if;
  if v_b.start_delay not between (v_limits ->> 'start_delay_b_min_seconds')::integer
                             and (v_limits ->> 'start_delay_b_max_seconds')::integer then
    raise exception 'flow %: step % start_delay % is outside % .. % s', v2_start_run.flow_slug,
      v_b.step_slug, v_b.start_delay, v_limits ->> 'start_delay_b_min_seconds',
      v_limits ->> 'start_delay_b_max_seconds'
      using errcode = 'DR001';
  end if;
  if v2_start_run.input is null then
    raise exception 'flow %: run input is SQL NULL', v2_start_run.flow_slug
      using errcode = 'DR009', hint = 'Pass ''null''::jsonb for a JSON null input.';
  end if;
  v_bytes := pg_catalog.octet_length(v2_start_run.input::text);
  if v_bytes > (v_limits ->> 'input_max_bytes')::integer then
    raise exception 'flow %: run input has % bytes, more than %', v2_start_run.flow_slug, v_bytes,
      v_limits ->> 'input_max_bytes'
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
  return v_run_id;
end;
$$;


-- ----- 0630_function_v2_claim.sql
-- v2_claim: grant one queued v2 task to exactly one caller, for the one message it read.
-- The worker's pgmq.read before this call is a separate, earlier reservation and never counts
-- as ownership; ownership is the claim returned here.
-- Locks: run (for no key update) -> work (for update) -> the step state -> the task (for
--   update) -> its message (pgmq.set_vt). No definition lock: a flow with a non-terminal v2
--   run cannot change (DR011); a changed live definition is still detected (DR005).
-- Refuses (nothing written): DR003 not exactly one message id · DR014 unknown run or step ·
--   DR015 v1 run · DR004 the pair is not the task's stored snapshot and the step's route ·
--   DR005 the live definition differs from the run's.
-- Not claimable now (an empty set, nothing written): run not started, work dirty or not
--   caught up, health backoff or attention, step state not started, task not queued, the
--   message gone, or another session won the task first.
-- Writes on a grant: step_tasks (started, attempts_count + 1, started_at), task_claims
--   (current, with the policy snapshot), the message's vt = the lease horizon
--   (claim time + effective timeout + 2 s, the same instant).
create or replace function engine.v2_claim(run_id uuid, step_slug text, queue_name text, message_ids bigint[])
returns setof engine.v2_grant
language plpgsql security definer
set search_path = ''
as $$
declare
  v_limits jsonb := engine.v2_limits();
  v_message_id bigint;
  v_now timestamptz;
  v_run engine.runs;
  v_work engine.run_work;
  v_policy record;
  v_task engine.step_tasks;
  v_lease timestamptz;
  v_claim_id uuid := pg_catalog.gen_random_uuid();
begin
  -- arguments and identity first: nothing is locked or written before these pass
  v_message_id := engine._v2_delivery(v2_claim.run_id, v2_claim.step_slug, v2_claim.queue_name,
                                      v2_claim.message_ids);

  -- lock the run, then the work row, in the contract's order
  select r.* into strict v_run from engine.runs as r where r.run_id = v2_claim.run_id for no key update;
  perform engine._hook('claim.after_run_lock');
  if v_run.definition_hash is distinct from
       (select f.definition_hash from engine.flows as f where f.flow_slug = v_run.flow_slug) then
    raise exception 'run %: the live definition of flow % differs from the one the run started with',
      v2_claim.run_id, v_run.flow_slug
      using errcode = 'DR005';
  end if;
  if v_run.status <> 'started' then
    return;
  end if;
  select w.* into strict v_work from engine.run_work as w where w.run_id = v2_claim.run_id for update;
  if v_work.requested_generation <> v_work.processed_generation or v_work.health <> 'clean' then
    return;
  end if;
  perform from engine.step_states as ss
   where ss.run_id = v2_claim.run_id and ss.step_slug = v2_claim.step_slug and ss.status = 'started'
     for update;
  if not found then
    return;
  end if;
  select t.* into v_task
    from engine.step_tasks as t
   where t.run_id = v2_claim.run_id and t.step_slug = v2_claim.step_slug and t.task_index = 0
     for update;
  if v_task.status is distinct from 'queued' then
    return;
  end if;

  select coalesce(s.timeout, f.timeout) as timeout, coalesce(s.max_attempts, f.max_attempts) as max_attempts,
         coalesce(s.start_delay, 0) as start_delay
    into strict v_policy
    from engine.steps as s join engine.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_run.flow_slug and s.step_slug = v2_claim.step_slug;

  -- one instant for claimed_at, the lease horizon and the message's vt
  v_now := pg_catalog.clock_timestamp();
  v_lease := v_now + pg_catalog.make_interval(
    secs => v_policy.timeout + (v_limits ->> 'lease_grace_seconds')::integer);

  -- the guarded update decides the winner; only its returned row is granted
  update engine.step_tasks as t
     set status = 'started', attempts_count = t.attempts_count + 1, started_at = v_now
   where t.run_id = v2_claim.run_id and t.step_slug = v2_claim.step_slug and t.task_index = 0
     and t.status = 'queued'
  returning t.* into v_task;
  if not found then
    return;
  end if;

  perform from pgmq.set_vt(v_task.queue_name, v_task.message_id, v_lease);
  if not found then
    -- the message is gone: undo the guarded update and refuse (nothing stays written)
    raise exception 'run %, step %: message % is no longer in queue %', v2_claim.run_id,
      v2_claim.step_slug, v_task.message_id, v_task.queue_name
      using errcode = 'DR006';
  end if;

  insert into engine.task_claims (claim_id, run_id, step_slug, task_index, attempt, queue_name,
                                  message_id, claimed_at, lease_expires_at, timeout, max_attempts,
                                  start_delay, state)
  values (v_claim_id, v2_claim.run_id, v2_claim.step_slug, 0,
          v_task.attempts_count,  -- a v2 task is claimed once (max_attempts 1); takeovers number on
          v_task.queue_name, v_task.message_id, v_now, v_lease, v_policy.timeout,
          v_policy.max_attempts, v_policy.start_delay, 'current');

  return next row(v_claim_id, v2_claim.run_id, v2_claim.step_slug, 0, v_task.queue_name,
                  v_task.message_id, engine._task_input(v2_claim.run_id, v2_claim.step_slug),
                  v_lease)::engine.v2_grant;
end;
$$;


-- ----- 0670_function_v2_reconcile.sql
-- v2_reconcile: move one v2 run forward in one transaction, in separately committed calls.
-- Skips (writes nothing) when health is attention, or backoff before next_attempt_at.
-- Otherwise performs at most max_actions immediate actions (_v2_next_action): once A is
-- completed, start B's step state and create B's task ('create_b'), then send B's message to
-- B's stored route with B's start_delay and snapshot the pair ('send_b'); once B is
-- completed, complete the run with output = B's result ('complete'). Each action
-- runs in a subtransaction: an error rolls the action back entirely, is recorded in
-- engine_errors, counts consecutive_errors, sets backoff (1 s * 2^(n-1), capped at 60 s) and,
-- after 3 in a row, attention; all of that commits. Only when, under the same locks, no
-- immediate action remains does it set processed_generation to the requested_generation it
-- holds locked; a call that stops with actions left marks nothing processed. A successful call
-- resets the error count and health. A call that finds nothing to do writes nothing.
-- Locks: run (for no key update) -> work (for update) -> step states by step_slug -> tasks ->
--   B's new message.
-- Refuses (nothing written): DR008 max_actions outside 1 .. 64 · DR014 unknown run ·
--   DR015 v1 run · DR005 the live definition differs from the run's.
create or replace function engine.v2_reconcile(run_id uuid, max_actions integer default 8)
returns engine.v2_report
language plpgsql security definer
set search_path = ''
as $$
declare
  v_limits jsonb := engine.v2_limits();
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_run engine.runs;
  v_work engine.run_work;
  v_action text;
  v_actions integer := 0;
  v_b record;
  v_message_id bigint;
  v_failed boolean := false;
  v_sqlstate text;
  v_message text;
  v_context text;
  v_errors integer;
begin
  if v2_reconcile.max_actions is null
     or v2_reconcile.max_actions not between (v_limits ->> 'reconcile_actions_min')::integer
                                     and (v_limits ->> 'reconcile_actions_max')::integer then
    raise exception 'run %: max_actions % is outside % .. %', v2_reconcile.run_id,
      pg_catalog.quote_nullable(v2_reconcile.max_actions::text),
      v_limits ->> 'reconcile_actions_min', v_limits ->> 'reconcile_actions_max'
      using errcode = 'DR008';
  end if;
  select r.* into v_run from engine.runs as r where r.run_id = v2_reconcile.run_id;
  if v_run.run_id is null then
    raise exception 'unknown run %', pg_catalog.quote_nullable(v2_reconcile.run_id::text)
      using errcode = 'DR014';
  end if;
  if v_run.protocol <> 'v2' then
    raise exception 'run % is a % run, not v2', v2_reconcile.run_id, v_run.protocol
      using errcode = 'DR015';
  end if;

  select r.* into strict v_run from engine.runs as r where r.run_id = v2_reconcile.run_id for no key update;
  if v_run.definition_hash is distinct from
       (select f.definition_hash from engine.flows as f where f.flow_slug = v_run.flow_slug) then
    raise exception 'run %: the live definition of flow % differs from the one the run started with',
      v2_reconcile.run_id, v_run.flow_slug
      using errcode = 'DR005';
  end if;
  select w.* into strict v_work from engine.run_work as w where w.run_id = v2_reconcile.run_id for update;
  perform engine._hook('reconcile.after_work_lock');
  if v_work.health = 'attention' or (v_work.health = 'backoff' and v_now < v_work.next_attempt_at) then
    return row(v2_reconcile.run_id, v_work.requested_generation, 0,
               v_work.processed_generation = v_work.requested_generation, v_work.health,
               v_run.status)::engine.v2_report;
  end if;
  perform from engine.step_states as ss
   where ss.run_id = v2_reconcile.run_id order by ss.step_slug for update;

  loop
    v_action := engine._v2_next_action(v2_reconcile.run_id);
    exit when v_action is null or v_actions >= v2_reconcile.max_actions;
    begin
      if v_action in ('create_b', 'send_b') then
        select s.step_slug, s.queue_name, coalesce(s.start_delay, 0) as start_delay
          into strict v_b
          from engine.steps as s
         where s.flow_slug = v_run.flow_slug and s.deps_count > 0;
      end if;
      if v_action = 'create_b' then
        update engine.step_states as ss
           set status = 'started', started_at = v_now, remaining_deps = 0
         where ss.run_id = v2_reconcile.run_id and ss.step_slug = v_b.step_slug;
        insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, queued_at)
        values (v2_reconcile.run_id, v_b.step_slug, v_run.flow_slug, 0, 'queued', v_now);
      elsif v_action = 'send_b' then
        perform from engine.step_tasks as t
         where t.run_id = v2_reconcile.run_id and t.step_slug = v_b.step_slug and t.task_index = 0
           for update;
        select m.msg_id into strict v_message_id
          from pgmq.send(v_b.queue_name,
                         engine._task_message('v2', v2_reconcile.run_id, v_b.step_slug, 0),
                         v_now + pg_catalog.make_interval(secs => v_b.start_delay)) as m (msg_id);
        update engine.step_tasks as t
           set queue_name = v_b.queue_name, message_id = v_message_id
         where t.run_id = v2_reconcile.run_id and t.step_slug = v_b.step_slug
           and t.task_index = 0 and t.message_id is null;
      else
        update engine.runs as r
           set status = 'completed', completed_at = v_now, remaining_steps = 0,
               output = (select t.output from engine.step_tasks as t
                          join engine.steps as s on s.flow_slug = t.flow_slug
                                                and s.step_slug = t.step_slug
                         where t.run_id = v2_reconcile.run_id and s.deps_count > 0)
         where r.run_id = v2_reconcile.run_id
        returning r.* into v_run;
      end if;
      perform engine._hook('reconcile.action');
    exception when others then
      get stacked diagnostics v_sqlstate = returned_sqlstate, v_message = message_text,
                              v_context = pg_exception_context;
      v_failed := true;
    end;
    exit when v_failed;
    v_actions := v_actions + 1;
  end loop;

  if v_failed then
    v_errors := v_work.consecutive_errors + 1;
    insert into engine.engine_errors (run_id, generation, action, sqlstate, message, context,
                                      occurred_at)
    values (v2_reconcile.run_id, v_work.requested_generation, v_action, v_sqlstate, v_message,
            v_context, v_now);
    update engine.run_work as w
       set consecutive_errors = v_errors,
           health = case when v_errors >= (v_limits ->> 'errors_before_attention')::integer
                         then 'attention' else 'backoff' end,
           next_attempt_at = v_now + pg_catalog.make_interval(secs => least(
             (v_limits ->> 'backoff_base_seconds')::integer * pg_catalog.power(2, v_errors - 1),
             (v_limits ->> 'backoff_cap_seconds')::integer)),
           attention_reason = case
             when v_errors >= (v_limits ->> 'errors_before_attention')::integer
             then pg_catalog.format('%s consecutive engine errors; last: %s [%s] %s', v_errors,
                                    v_action, v_sqlstate, v_message) end
     where w.run_id = v2_reconcile.run_id
    returning w.* into v_work;
    -- the failed action was rolled back: report the run as it stands, not as the action left it
    return row(v2_reconcile.run_id, v_work.requested_generation, v_actions, false, v_work.health,
               (select r.status from engine.runs as r where r.run_id = v2_reconcile.run_id)
              )::engine.v2_report;
  end if;

  perform engine._hook('reconcile.before_mark_processed');
  if v_action is null
     and (v_work.processed_generation <> v_work.requested_generation or v_work.health <> 'clean') then
    update engine.run_work as w
       set processed_generation = v_work.requested_generation,
           health = 'clean', consecutive_errors = 0, next_attempt_at = null, attention_reason = null
     where w.run_id = v2_reconcile.run_id
    returning w.* into v_work;
  elsif v_actions > 0 and v_work.health <> 'clean' then
    update engine.run_work as w
       set health = 'clean', consecutive_errors = 0, next_attempt_at = null, attention_reason = null
     where w.run_id = v2_reconcile.run_id
    returning w.* into v_work;
  end if;
  return row(v2_reconcile.run_id, v_work.requested_generation, v_actions,
             v_work.processed_generation = v_work.requested_generation, v_work.health,
             v_run.status)::engine.v2_report;
end;
$$;


-- ----- privileges
revoke all on all functions in schema engine from public;
revoke all on all tables in schema engine from public;
