-- 0004_dirty_runs_v2.sql: Dirty Runs v2 (CONTRACT sections 3 to 8) on top of the v1 engine.
-- Adds the v2 storage (runs.protocol and definition_hash, step_tasks.infrastructure_losses,
-- run_work with its monotonic-generation trigger, task_claims, task_settlements,
-- engine_errors), the envelope engine.v2_limits(), the five functions v2_start_run, v2_claim,
-- v2_take_over, v2_settle, v2_reconcile, the test hooks engine._hook(point), the v1 writers'
-- refusal of v2 state (DR010) and the definition lock of flows with active v2 runs (DR011).
-- Existing runs become protocol 'v1'. This is the candidate artifact the evidence runs against.

alter table engine.runs add column protocol text not null default 'v1';
alter table engine.runs add column definition_hash text;
alter table engine.runs add constraint run_protocol_is_v1_or_v2 check (protocol in ('v1', 'v2'));
alter table engine.runs add constraint v2_run_records_its_definition_hash
  check ((protocol = 'v2') = (definition_hash is not null));
create index active_v2_runs_by_flow on engine.runs (flow_slug)
  where protocol = 'v2' and status = 'started';

alter table engine.step_tasks add column infrastructure_losses integer not null default 0;
alter table engine.step_tasks add constraint infrastructure_losses_is_not_negative
  check (infrastructure_losses >= 0);


-- ----- 0160_table_run_work.sql
-- run_work: the stable orchestration work row of a v2 run, created with the run and kept for
-- its lifetime. The run is dirty while requested_generation > processed_generation; only a
-- reconcile that finds no immediate action left under its locks marks a generation processed.
create table engine.run_work (
  run_id uuid not null,
  requested_generation bigint not null default 0,
  processed_generation bigint not null default 0,
  health text not null default 'clean',
  consecutive_errors integer not null default 0,
  next_attempt_at timestamptz,
  attention_reason text,
  constraint run_work_is_identified_by_its_run primary key (run_id),
  constraint run_work_belongs_to_a_run
    foreign key (run_id) references engine.runs (run_id) on delete cascade,
  constraint generations_are_not_negative
    check (requested_generation >= 0 and processed_generation >= 0),
  constraint processed_generation_never_exceeds_requested
    check (processed_generation <= requested_generation),
  constraint health_is_clean_backoff_or_attention check (health in ('clean', 'backoff', 'attention')),
  constraint consecutive_errors_is_not_negative check (consecutive_errors >= 0),
  constraint backoff_has_a_next_attempt_time check (health <> 'backoff' or next_attempt_at is not null),
  constraint attention_has_a_reason check ((health = 'attention') = (attention_reason is not null))
);
create index dirty_or_unhealthy_work on engine.run_work (run_id)
  where requested_generation > processed_generation or health <> 'clean';


-- ----- 0162_function__run_work_generations_are_monotonic.sql
-- _run_work_generations_are_monotonic: trigger function. Neither generation may decrease and
-- processed may never pass requested; an increment past the bigint range already fails in the
-- arithmetic (22003), so generations never wrap.
create or replace function engine._run_work_generations_are_monotonic()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if new.requested_generation < old.requested_generation
     or new.processed_generation < old.processed_generation then
    raise exception 'run %: generations may not decrease (requested % -> %, processed % -> %)',
      old.run_id, old.requested_generation, new.requested_generation,
      old.processed_generation, new.processed_generation
      using errcode = '23514';
  end if;
  if new.processed_generation > new.requested_generation then
    raise exception 'run %: processed generation % would exceed requested generation %',
      old.run_id, new.processed_generation, new.requested_generation
      using errcode = '23514';
  end if;
  return new;
end;
$$;


-- ----- 0164_trigger_run_work_generations_are_monotonic.sql
-- run_work_generations_are_monotonic: no update may move a generation backwards.
create trigger run_work_generations_are_monotonic
  before update of requested_generation, processed_generation on engine.run_work
  for each row execute function engine._run_work_generations_are_monotonic();


-- ----- 0170_table_task_claims.sql
-- task_claims: the ownership history of v2 tasks. A claim owns one physical message pair until
-- it is settled or revoked by a takeover; rows are never rewritten except their state. At most
-- one current claim per task. attempt numbers the claims of a task (1, 2 after a takeover).
create table engine.task_claims (
  claim_id uuid not null,
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  attempt integer not null,
  queue_name text not null,
  message_id bigint not null,
  claimed_at timestamptz not null,
  lease_expires_at timestamptz not null,
  timeout integer not null,
  max_attempts integer not null,
  start_delay integer not null,
  state text not null default 'current',
  revoked_at timestamptz,
  replaced_by uuid,
  constraint task_claims_are_identified_by_claim_id primary key (claim_id),
  constraint claim_belongs_to_a_task foreign key (run_id, step_slug, task_index)
    references engine.step_tasks (run_id, step_slug, task_index) on delete cascade,
  constraint claim_is_replaced_by_a_claim
    foreign key (replaced_by) references engine.task_claims (claim_id)
    deferrable initially deferred,
  constraint claim_state_is_current_settled_or_revoked
    check (state in ('current', 'settled', 'revoked')),
  constraint revoked_claim_has_revoked_at check ((state = 'revoked') = (revoked_at is not null)),
  constraint only_a_revoked_claim_is_replaced check (replaced_by is null or state = 'revoked'),
  constraint lease_ends_after_the_claim check (lease_expires_at > claimed_at),
  constraint claim_attempt_is_positive check (attempt >= 1)
);
create unique index one_current_claim_per_task on engine.task_claims (run_id, step_slug, task_index)
  where state = 'current';
create index claims_by_task on engine.task_claims (run_id, step_slug, task_index);


-- ----- 0172_function__task_claims_are_history.sql
-- _task_claims_are_history: trigger function. A claim row keeps everything it was created
-- with; only state moves, once, from current to settled or revoked (with revoked_at and
-- replaced_by for a revocation).
create or replace function engine._task_claims_are_history()
returns trigger
language plpgsql
set search_path = ''
as $$
begin
  if (new.claim_id, new.run_id, new.step_slug, new.task_index, new.attempt, new.queue_name,
      new.message_id, new.claimed_at, new.lease_expires_at, new.timeout, new.max_attempts,
      new.start_delay)
     is distinct from
     (old.claim_id, old.run_id, old.step_slug, old.task_index, old.attempt, old.queue_name,
      old.message_id, old.claimed_at, old.lease_expires_at, old.timeout, old.max_attempts,
      old.start_delay) then
    raise exception 'claim % is history: only its state may change', old.claim_id
      using errcode = '23514';
  end if;
  if old.state <> 'current' and new is distinct from old then
    raise exception 'claim % is % and can no longer change', old.claim_id, old.state
      using errcode = '23514';
  end if;
  return new;
end;
$$;


-- ----- 0174_trigger_task_claims_are_history.sql
-- task_claims_are_history: a claim row is never rewritten except its state.
create trigger task_claims_are_history
  before update on engine.task_claims
  for each row execute function engine._task_claims_are_history();


-- ----- 0180_table_task_settlements.sql
-- task_settlements: one row per accepted settlement of a claim, the receipt every replay
-- returns. requested_generation is the work generation this settlement requested.
create table engine.task_settlements (
  claim_id uuid not null,
  run_id uuid not null,
  outcome text not null,
  result jsonb not null,
  settled_at timestamptz not null,
  requested_generation bigint not null,
  constraint settlements_are_identified_by_claim primary key (claim_id),
  constraint settlement_settles_a_claim
    foreign key (claim_id) references engine.task_claims (claim_id) on delete cascade,
  constraint settlement_belongs_to_a_run
    foreign key (run_id) references engine.runs (run_id) on delete cascade,
  constraint settlement_outcome_is_completed_or_failed check (outcome in ('completed', 'failed'))
);
create index settlements_by_run on engine.task_settlements (run_id);


-- ----- 0190_table_engine_errors.sql
-- engine_errors: durable record of every reconcile action that failed and was rolled back.
create table engine.engine_errors (
  error_id bigint generated always as identity,
  run_id uuid not null,
  generation bigint not null,
  action text not null,
  sqlstate text not null,
  message text not null,
  context text,
  occurred_at timestamptz not null,
  constraint engine_errors_are_identified_by_error_id primary key (error_id),
  constraint engine_error_belongs_to_a_run
    foreign key (run_id) references engine.runs (run_id) on delete cascade
);
create index engine_errors_by_run on engine.engine_errors (run_id, occurred_at);


-- ----- 0210_type_v2_grant.sql
-- v2_grant: a won claim: the claim id that fences every later report, the task, its owned
-- message pair, the handler input and the lease horizon.
create type engine.v2_grant as (
  claim_id uuid,
  run_id uuid,
  step_slug text,
  task_index integer,
  queue_name text,
  message_id bigint,
  input jsonb,
  lease_expires_at timestamptz
);


-- ----- 0220_type_v2_receipt.sql
-- v2_receipt: the answer to a settlement: accepted, replayed, conflict, stale or terminal.
create type engine.v2_receipt as (
  verdict text,
  claim_id uuid,
  outcome text,
  result jsonb,
  generation bigint,
  settled_at timestamptz
);


-- ----- 0230_type_v2_report.sql
-- v2_report: what one reconcile call did.
create type engine.v2_report as (
  run_id uuid,
  generation bigint,
  actions integer,
  processed boolean,
  health text,
  run_status text
);


-- ----- 0360_function__hook_key.sql
-- _hook_key: the advisory lock key of a hook point: (7001, hashtext(point) & 0x7fffffff).
create or replace function engine._hook_key(point text)
returns integer
language sql immutable parallel safe
set search_path = ''
as $$
  select pg_catalog.hashtext(point) operator(pg_catalog.&) 2147483647;
$$;


-- ----- 0362_function__hook.sql
-- _hook: a test hook that does nothing unless the session setting engine.hooks names its point.
-- engine.hooks is a comma-separated list; 'point' makes the point wait, 'point:fail' makes it
-- fail. Waiting raises a NOTICE, then takes and at once releases a shared advisory lock
-- (7001, _hook_key(point)), so a controller holding that lock exclusively parks the session
-- here, visibly in pg_locks. Failing raises SQLSTATE DR900. Unarmed it reads one setting and
-- returns: no lock, no write.
create or replace function engine._hook(point text)
returns void
language plpgsql
set search_path = ''
as $$
declare
  v_armed text := pg_catalog.current_setting('engine.hooks', true);
  v_points text[];
  v_key integer;
begin
  if v_armed is null or v_armed = '' then
    return;
  end if;
  v_points := pg_catalog.string_to_array(pg_catalog.replace(v_armed, ' ', ''), ',');
  if _hook.point = any (v_points) then
    v_key := engine._hook_key(_hook.point);
    raise notice 'hook % waits on advisory lock (7001, %)', _hook.point, v_key;
    perform pg_catalog.pg_advisory_lock_shared(7001, v_key);
    perform pg_catalog.pg_advisory_unlock_shared(7001, v_key);
  elsif (_hook.point || ':fail') = any (v_points) then
    raise exception 'hook % is armed to fail', _hook.point using errcode = 'DR900';
  end if;
end;
$$;


-- ----- 0370_function__definition_hash.sql
-- _definition_hash: the identity of a flow's live definition (options, mode, every step with
-- its position, options, route and dependencies). A v2 run records it at start; claims and
-- reconciliation refuse (DR005) when the live definition no longer matches.
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


-- ----- 0380_function__assert_definition_unlocked.sql
-- _assert_definition_unlocked: refuse a change to a flow while any of its v2 runs is not
-- terminal. The caller holds the flow row for update, so no v2 run can start meanwhile
-- (v2_start_run holds it for share).
-- Refuses: DR011 naming the flow and how many v2 runs are active.
create or replace function engine._assert_definition_unlocked(flow_slug text, change text)
returns void
language plpgsql
set search_path = ''
as $$
declare
  v_active bigint;
begin
  select pg_catalog.count(*) into v_active
    from engine.runs as r
   where r.flow_slug = _assert_definition_unlocked.flow_slug
     and r.protocol = 'v2' and r.status = 'started';
  if v_active > 0 then
    raise exception 'flow % cannot change (%): % v2 run(s) are not terminal',
      _assert_definition_unlocked.flow_slug, _assert_definition_unlocked.change, v_active
      using errcode = 'DR011',
            hint = 'Let the v2 runs of this flow finish first.';
  end if;
end;
$$;


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
  return v_flow;
end;
$$;


-- ----- 0410_function_add_step.sql
-- add_step: add a single-task step to a flow; its deps must already be steps of the flow, so a
-- cycle can only be a step naming itself. The step's route is lower(flow_slug) in a plain flow
-- and its private queue (created here) in a step-queued flow.
-- Locks: definition (the flow row for update) -> the advisory lock of a private queue name.
-- Refuses: DR014 unknown flow or dependency · DR001 invalid or reserved slug, null, duplicate
--          or self dependency, option out of range · DR016 the step exists with other options
--          · DR012 the private queue name is taken · DR011 a v2 run of the flow is not
--          terminal (any change; an identical redefinition is still a no-op).
-- Writes: steps, deps, and the private PGMQ queue of a step-queued flow.
-- Defining the same step again with identical options is a no-op that returns the row.
create or replace function engine.add_step(
  flow_slug text,
  step_slug text,
  deps text[] default '{}',
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null,
  start_delay integer default null
) returns engine.steps
language plpgsql security definer
set search_path = ''
as $$
declare
  v_deps text[] := coalesce(add_step.deps, '{}');
  v_mode text;
  v_step engine.steps;
  v_existing_deps text[];
  v_unknown text[];
  v_index integer;
  v_route text;
begin
  select f.queue_mode into v_mode
    from engine.flows as f where f.flow_slug = add_step.flow_slug for update;
  if not found then
    raise exception 'unknown flow %', pg_catalog.quote_nullable(add_step.flow_slug)
      using errcode = 'DR014';
  end if;

  if not engine._is_valid_slug(add_step.step_slug) then
    raise exception 'flow %: step slug % is not a valid slug',
      add_step.flow_slug, pg_catalog.quote_nullable(add_step.step_slug)
      using errcode = 'DR001',
            hint = 'A slug matches ^[A-Za-z_][A-Za-z0-9_]*$ and has at most 128 characters.';
  end if;
  if add_step.step_slug = 'run' then
    raise exception 'flow %: step slug "run" is reserved for the run input', add_step.flow_slug
      using errcode = 'DR001';
  end if;
  if pg_catalog.array_position(v_deps, null) is not null then
    raise exception 'flow %, step %: deps contain a null', add_step.flow_slug, add_step.step_slug
      using errcode = 'DR001';
  end if;
  if add_step.step_slug = any (v_deps) then
    raise exception 'flow %, step %: a step cannot depend on itself (cycle)',
      add_step.flow_slug, add_step.step_slug
      using errcode = 'DR001';
  end if;
  if (select pg_catalog.count(distinct d) from pg_catalog.unnest(v_deps) as d)
     <> pg_catalog.cardinality(v_deps) then
    raise exception 'flow %, step %: duplicate dependency in %',
      add_step.flow_slug, add_step.step_slug, v_deps
      using errcode = 'DR001';
  end if;
  if add_step.max_attempts < 1 or add_step.base_delay < 0 or add_step.timeout < 1
     or add_step.start_delay < 0 then
    raise exception 'flow %, step %: options out of range (max_attempts %, base_delay %, timeout %, start_delay %)',
      add_step.flow_slug, add_step.step_slug, add_step.max_attempts, add_step.base_delay,
      add_step.timeout, add_step.start_delay
      using errcode = 'DR001',
            hint = 'max_attempts >= 1, base_delay >= 0, timeout >= 1, start_delay >= 0, or null to inherit.';
  end if;

  select s.* into v_step
    from engine.steps as s
   where s.flow_slug = add_step.flow_slug and s.step_slug = add_step.step_slug;
  if found then
    select coalesce(pg_catalog.array_agg(d.dep_slug order by d.dep_slug), '{}')
      into v_existing_deps
      from engine.deps as d
     where d.flow_slug = add_step.flow_slug and d.step_slug = add_step.step_slug;
    if v_existing_deps is distinct from
         (select coalesce(pg_catalog.array_agg(x order by x), '{}') from pg_catalog.unnest(v_deps) as x)
       or (v_step.max_attempts, v_step.base_delay, v_step.timeout, v_step.start_delay)
          is distinct from (add_step.max_attempts, add_step.base_delay, add_step.timeout,
                            add_step.start_delay) then
      perform engine._assert_definition_unlocked(add_step.flow_slug, 'step ' || add_step.step_slug);
      raise exception 'flow %, step % already exists with different deps or options',
        add_step.flow_slug, add_step.step_slug
        using errcode = 'DR016',
              detail = pg_catalog.format(
                'existing: deps %s, max_attempts %s, base_delay %s, timeout %s, start_delay %s; given: deps %s, max_attempts %s, base_delay %s, timeout %s, start_delay %s',
                v_existing_deps, v_step.max_attempts, v_step.base_delay, v_step.timeout,
                v_step.start_delay, v_deps, add_step.max_attempts, add_step.base_delay,
                add_step.timeout, add_step.start_delay);
    end if;
    return v_step;
  end if;

  perform engine._assert_definition_unlocked(add_step.flow_slug, 'new step ' || add_step.step_slug);

  select pg_catalog.array_agg(x order by x) into v_unknown
    from pg_catalog.unnest(v_deps) as x
   where not exists (
     select from engine.steps as s where s.flow_slug = add_step.flow_slug and s.step_slug = x);
  if v_unknown is not null then
    raise exception 'flow %, step %: unknown dependencies %',
      add_step.flow_slug, add_step.step_slug, v_unknown
      using errcode = 'DR014',
            hint = 'Add a step before the steps that depend on it.';
  end if;

  select pg_catalog.count(*) into v_index
    from engine.steps as s where s.flow_slug = add_step.flow_slug;
  if v_mode = 'step' then
    v_route := engine._step_queue_name(add_step.flow_slug, add_step.step_slug, v_index);
    perform engine._reserve_queue_name(add_step.flow_slug, v_route);
  else
    v_route := pg_catalog.lower(add_step.flow_slug);
  end if;

  insert into engine.steps as s (flow_slug, step_slug, step_index, deps_count, max_attempts,
                                 base_delay, timeout, start_delay, queue_name)
  values (add_step.flow_slug, add_step.step_slug, v_index, pg_catalog.cardinality(v_deps),
          add_step.max_attempts, add_step.base_delay, add_step.timeout, add_step.start_delay,
          v_route)
  returning s.* into v_step;

  insert into engine.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, x, add_step.step_slug from pg_catalog.unnest(v_deps) as x;

  if v_mode = 'step' then
    perform engine._ensure_queue(v_route);
  end if;
  return v_step;
end;
$$;


-- ----- 0420_function_delete_flow.sql
-- delete_flow: remove a flow with its runs, tasks and the queues it routes to (a plain flow's
-- queue, a step-queued flow's private queues), messages dropped with the queues and no
-- per-message archive first. A queue the flow does not route to is never dropped.
-- Locks: definition (the flow row for update) -> its runs (for update).
-- Refuses: DR014 unknown flow · DR011 a v2 run of the flow is not terminal.
-- Writes: deletes runs (with step_states and step_tasks), deps, steps, the flow; drops queues.
create or replace function engine.delete_flow(flow_slug text)
returns void
language plpgsql security definer
set search_path = ''
as $$
declare
  v_routes text[];
  v_queue text;
begin
  perform from engine.flows as f where f.flow_slug = delete_flow.flow_slug for update;
  if not found then
    raise exception 'unknown flow %', pg_catalog.quote_nullable(delete_flow.flow_slug)
      using errcode = 'DR014';
  end if;
  perform engine._assert_definition_unlocked(delete_flow.flow_slug, 'delete');

  select pg_catalog.array_agg(distinct r.name)
    into v_routes
    from (select s.queue_name as name from engine.steps as s
           where s.flow_slug = delete_flow.flow_slug
          union all
          select pg_catalog.lower(f.flow_slug) from engine.flows as f
           where f.flow_slug = delete_flow.flow_slug and f.queue_mode = 'flow') as r;

  perform from engine.runs as r where r.flow_slug = delete_flow.flow_slug order by r.run_id for update;
  delete from engine.runs as r where r.flow_slug = delete_flow.flow_slug;
  delete from engine.deps as d where d.flow_slug = delete_flow.flow_slug;
  delete from engine.steps as s where s.flow_slug = delete_flow.flow_slug;
  delete from engine.flows as f where f.flow_slug = delete_flow.flow_slug;

  for v_queue in
    select q.queue_name from pgmq.list_queues() as q
     where pg_catalog.lower(q.queue_name) = any (v_routes)
     order by 1
  loop
    perform pgmq.drop_queue(v_queue);
  end loop;
end;
$$;


-- ----- 0510_function_start_tasks.sql
-- start_tasks: a v1 worker claims the queued tasks behind the messages it has read.
-- Only rows that the guarded UPDATE ... RETURNING actually changed are granted, so two
-- sessions claiming one message get one winner. Each winner's message becomes invisible
-- until the effective step timeout + 2 s. Messages match on the task's snapshot
-- (queue_name, message_id) only, so an equal id in another queue never matches. Unknown
-- message ids and tasks of v2 runs are ignored (no grant, no write). Queue names compare
-- lower-cased, as in PGMQ.
-- Locks: candidate step_tasks by (run_id, step_slug, task_index) -> their messages.
-- Writes: step_tasks (started, attempts_count + 1), the winners' message vt.
create or replace function engine.start_tasks(queue_name text, message_ids bigint[])
returns setof engine.task_grant
language plpgsql security definer
set search_path = ''
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


-- ----- 0520_function_complete_task.sql
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
create or replace function engine.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb)
returns engine.step_tasks
language plpgsql security definer
set search_path = ''
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

  select r.* into v_run from engine.runs as r where r.run_id = complete_task.run_id;
  if not found then
    raise exception 'unknown run %', complete_task.run_id using errcode = 'DR014';
  end if;
  if v_run.protocol <> 'v1' then
    raise exception 'run % is a % run: complete_task is a v1 writer and refuses it', complete_task.run_id,
      v_run.protocol
      using errcode = 'DR010', hint = 'A v2 task is settled with engine.v2_settle(claim_id, ...).';
  end if;
  select r.* into strict v_run from engine.runs as r where r.run_id = complete_task.run_id for update;

  perform
    from engine.step_states as ss
   where ss.run_id = complete_task.run_id
     and (ss.step_slug = complete_task.step_slug
          or ss.step_slug in (select d.step_slug from engine.deps as d
                               where d.flow_slug = v_run.flow_slug
                                 and d.dep_slug = complete_task.step_slug))
   order by ss.step_slug
     for update;

  select t.* into v_task
    from engine.step_tasks as t
   where t.run_id = complete_task.run_id and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
     for update;
  if not found then
    raise exception 'run %: unknown task %[%]', complete_task.run_id, complete_task.step_slug,
      complete_task.task_index
      using errcode = 'DR014';
  end if;
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


-- ----- 0530_function_fail_task.sql
-- fail_task: a v1 worker reports a handler failure. While attempts remain the task is queued
-- again and its message becomes visible after base_delay * 2^(attempts - 1) seconds; the last
-- failure fails the step and the run, and terminalizes every unfinished task of the run.
-- A task that is no longer started is left as it is and returned unchanged.
-- Locks: run (for update) -> step_states by step_slug -> the task -> messages.
-- Refuses: DR014 unknown run or task · DR010 a v2 run.
-- Writes: step_tasks, its message (vt on retry, archive on the last failure), step_states and
--         runs on the last failure.
create or replace function engine.fail_task(run_id uuid, step_slug text, task_index integer, error_message text)
returns engine.step_tasks
language plpgsql security definer
set search_path = ''
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_run engine.runs;
  v_task engine.step_tasks;
  v_max_attempts integer;
  v_base_delay integer;
begin
  select r.* into v_run from engine.runs as r where r.run_id = fail_task.run_id;
  if not found then
    raise exception 'unknown run %', fail_task.run_id using errcode = 'DR014';
  end if;
  if v_run.protocol <> 'v1' then
    raise exception 'run % is a % run: fail_task is a v1 writer and refuses it', fail_task.run_id,
      v_run.protocol
      using errcode = 'DR010', hint = 'A v2 task is settled with engine.v2_settle(claim_id, ...).';
  end if;
  select r.* into strict v_run from engine.runs as r where r.run_id = fail_task.run_id for update;

  perform
    from engine.step_states as ss
   where ss.run_id = fail_task.run_id
   order by ss.step_slug
     for update;

  select t.* into v_task
    from engine.step_tasks as t
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
     for update;
  if not found then
    raise exception 'run %: unknown task %[%]', fail_task.run_id, fail_task.step_slug,
      fail_task.task_index
      using errcode = 'DR014';
  end if;
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


-- ----- 0540_function_requeue_stalled_tasks.sql
-- requeue_stalled_tasks: recover v1 tasks whose worker went silent. A started task whose
-- started_at + effective step timeout + 2 s has passed is queued again and its message made
-- visible now; a stalled task that has used its last attempt fails with its run instead.
-- Tasks of v2 runs are never touched (their recovery is v2_take_over).
-- Locks: per task, run (for update) -> step_states by step_slug -> the task -> its message.
-- Writes: step_tasks, message vt (requeue) or archive (last attempt), step_states and runs on
--         the last attempt.
-- Returns the number of tasks queued again.
create or replace function engine.requeue_stalled_tasks()
returns integer
language plpgsql security definer
set search_path = ''
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


-- ----- 0600_function_v2_limits.sql
-- v2_limits: the frozen v2 envelope as one jsonb object. Code reads limits from here, never
-- from scattered literals.
create or replace function engine.v2_limits()
returns jsonb
language sql immutable parallel safe
set search_path = ''
as $$
  select '{
    "steps": 2,
    "task_index": 0,
    "max_attempts": 1,
    "when_exhausted": "fail",
    "timeout_min_seconds": 1,
    "timeout_max_seconds": 900,
    "start_delay_a_seconds": 0,
    "start_delay_b_min_seconds": 0,
    "start_delay_b_max_seconds": 3600,
    "input_max_bytes": 65536,
    "result_max_bytes": 262144,
    "message_ids_per_call": 1,
    "takeovers_per_task": 1,
    "lease_grace_seconds": 2,
    "reconcile_actions_default": 8,
    "reconcile_actions_min": 1,
    "reconcile_actions_max": 64,
    "errors_before_attention": 3,
    "backoff_base_seconds": 1,
    "backoff_cap_seconds": 60,
    "worker_settlement_attempts": 3
  }'::jsonb;
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
          engine._definition_hash(v2_start_run.flow_slug));
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


-- ----- 0620_function__v2_delivery.sql
-- _v2_delivery: the argument and identity checks shared by v2_claim and v2_take_over, done
-- before any lock, scan or write. Returns the one message id.
-- Refuses: DR003 message_ids is not exactly one non-null id ({}, {1,2}, {5,5}, {NULL})
--   · DR014 unknown run, or a step the run's flow does not have · DR015 a v1 run
--   · DR004 the pair (queue_name, message id) is not the stored snapshot of the task of
--     (run, step), or not the step's route (a wrong queue, a wrong message, a wrong step, or a
--     step whose task does not exist yet). Snapshots never change, so no lock is needed.
create or replace function engine._v2_delivery(run_id uuid, step_slug text, queue_name text, message_ids bigint[])
returns bigint
language plpgsql stable
set search_path = ''
as $$
declare
  v_protocol text;
  v_flow text;
  v_route text;
  v_task_queue text;
  v_task_message bigint;
begin
  if _v2_delivery.message_ids is null
     or pg_catalog.array_ndims(_v2_delivery.message_ids) is distinct from 1
     or pg_catalog.cardinality(_v2_delivery.message_ids) <> (engine.v2_limits() ->> 'message_ids_per_call')::integer
     or pg_catalog.array_position(_v2_delivery.message_ids, null) is not null then
    raise exception 'run %, step %: message_ids % is not exactly one message id',
      _v2_delivery.run_id, _v2_delivery.step_slug,
      pg_catalog.quote_nullable(_v2_delivery.message_ids::text)
      using errcode = 'DR003';
  end if;

  select r.protocol, r.flow_slug into v_protocol, v_flow
    from engine.runs as r where r.run_id = _v2_delivery.run_id;
  if v_protocol is null then
    raise exception 'unknown run %', pg_catalog.quote_nullable(_v2_delivery.run_id::text)
      using errcode = 'DR014';
  end if;
  if v_protocol <> 'v2' then
    raise exception 'run % is a % run, not v2', _v2_delivery.run_id, v_protocol
      using errcode = 'DR015';
  end if;
  select s.queue_name into v_route
    from engine.steps as s where s.flow_slug = v_flow and s.step_slug = _v2_delivery.step_slug;
  if v_route is null then
    raise exception 'run %: flow % has no step %', _v2_delivery.run_id, v_flow,
      pg_catalog.quote_nullable(_v2_delivery.step_slug)
      using errcode = 'DR014';
  end if;

  select t.queue_name, t.message_id into v_task_queue, v_task_message
    from engine.step_tasks as t
   where t.run_id = _v2_delivery.run_id and t.step_slug = _v2_delivery.step_slug
     and t.task_index = 0;
  if v_task_queue is distinct from _v2_delivery.queue_name
     or v_task_message is distinct from _v2_delivery.message_ids[pg_catalog.array_lower(_v2_delivery.message_ids, 1)]
     or v_route is distinct from _v2_delivery.queue_name then
    raise exception 'run %, step %: message (%, %) is not this task''s message (%, %)',
      _v2_delivery.run_id, _v2_delivery.step_slug,
      pg_catalog.quote_nullable(_v2_delivery.queue_name),
      _v2_delivery.message_ids[pg_catalog.array_lower(_v2_delivery.message_ids, 1)],
      coalesce(v_task_queue, 'no task yet'), coalesce(v_task_message::text, '-')
      using errcode = 'DR004';
  end if;
  return v_task_message;
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
  if v_run.definition_hash is distinct from engine._definition_hash(v_run.flow_slug) then
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
          (select pg_catalog.count(*) + 1 from engine.task_claims as c
            where c.run_id = v2_claim.run_id and c.step_slug = v2_claim.step_slug),
          v_task.queue_name, v_task.message_id, v_now, v_lease, v_policy.timeout,
          v_policy.max_attempts, v_policy.start_delay, 'current');

  return next row(v_claim_id, v2_claim.run_id, v2_claim.step_slug, 0, v_task.queue_name,
                  v_task.message_id, engine._task_input(v2_claim.run_id, v2_claim.step_slug),
                  v_lease)::engine.v2_grant;
end;
$$;


-- ----- 0640_function_v2_take_over.sql
-- v2_take_over: controlled lease takeover of a started v2 task whose current claim is
-- expected_claim_id and whose lease horizon has passed.
-- Checked in this order: arguments and identity (DR003, DR004; DR014 unknown run or step,
--   DR015 v1 run); the task exists and is started, expected_claim_id is its current claim and
--   health is not attention (else DR006); the horizon has passed (else DR007); the task has a
--   takeover left (else the attention result).
-- Locks: run (for no key update) -> work (for update) -> the step state -> the task (for
--   update; it covers its claims) -> its message (pgmq.set_vt).
-- Writes on a takeover: the old claim -> revoked (revoked_at, replaced_by; its row otherwise
--   untouched), step_tasks.infrastructure_losses + 1, a new current claim with a new horizon,
--   vt of the task's stored pair = the new horizon. Handler-failure accounting (attempts_count)
--   is never changed.
-- With no takeover left: no grant, run_work.health = 'attention' with a reason (this commits:
--   it is a returned empty set, not an exception), the message stays in its queue.
create or replace function engine.v2_take_over(
  run_id uuid, step_slug text, expected_claim_id uuid, queue_name text, message_ids bigint[]
) returns setof engine.v2_grant
language plpgsql security definer
set search_path = ''
as $$
declare
  v_limits jsonb := engine.v2_limits();
  v_now timestamptz;
  v_run engine.runs;
  v_work engine.run_work;
  v_task engine.step_tasks;
  v_old engine.task_claims;
  v_lease timestamptz;
  v_claim_id uuid := pg_catalog.gen_random_uuid();
begin
  perform engine._v2_delivery(v2_take_over.run_id, v2_take_over.step_slug, v2_take_over.queue_name,
                              v2_take_over.message_ids);

  select r.* into strict v_run from engine.runs as r where r.run_id = v2_take_over.run_id for no key update;
  perform engine._hook('take_over.after_run_lock');
  select w.* into strict v_work from engine.run_work as w where w.run_id = v2_take_over.run_id for update;
  perform from engine.step_states as ss
   where ss.run_id = v2_take_over.run_id and ss.step_slug = v2_take_over.step_slug
     for update;
  select t.* into v_task
    from engine.step_tasks as t
   where t.run_id = v2_take_over.run_id and t.step_slug = v2_take_over.step_slug and t.task_index = 0
     for update;
  select c.* into v_old
    from engine.task_claims as c
   where c.run_id = v2_take_over.run_id and c.step_slug = v2_take_over.step_slug
     and c.task_index = 0 and c.state = 'current';

  if v_run.status <> 'started' or v_task.status is distinct from 'started'
     or v_old.claim_id is distinct from v2_take_over.expected_claim_id
     or v_work.health = 'attention' then
    raise exception 'run %, step %: claim % cannot be taken over (run %, task %, current claim %, health %)',
      v2_take_over.run_id, v2_take_over.step_slug,
      pg_catalog.quote_nullable(v2_take_over.expected_claim_id::text), v_run.status,
      coalesce(v_task.status, 'absent'), coalesce(v_old.claim_id::text, 'none'), v_work.health
      using errcode = 'DR006';
  end if;

  v_now := pg_catalog.clock_timestamp();
  if v_now < v_old.lease_expires_at then
    raise exception 'run %, step %: claim % holds its lease until %; takeover refused',
      v2_take_over.run_id, v2_take_over.step_slug, v_old.claim_id, v_old.lease_expires_at
      using errcode = 'DR007';
  end if;

  if v_task.infrastructure_losses >= (v_limits ->> 'takeovers_per_task')::integer then
    update engine.run_work as w
       set health = 'attention',
           attention_reason = pg_catalog.format(
             'step %s lost its claim %s (lease expired %s) after using its %s controlled takeover(s)',
             v2_take_over.step_slug, v_old.claim_id, v_old.lease_expires_at,
             v_limits ->> 'takeovers_per_task')
     where w.run_id = v2_take_over.run_id;
    return;
  end if;

  v_lease := v_now + pg_catalog.make_interval(
    secs => v_old.timeout + (v_limits ->> 'lease_grace_seconds')::integer);
  -- replaced_by is checked at commit (deferred), so the old claim is revoked first and the
  -- new one is inserted after it: there is never a moment with two current claims
  update engine.task_claims as c
     set state = 'revoked', revoked_at = v_now, replaced_by = v_claim_id
   where c.claim_id = v_old.claim_id;
  update engine.step_tasks as t
     set infrastructure_losses = t.infrastructure_losses + 1
   where t.run_id = v2_take_over.run_id and t.step_slug = v2_take_over.step_slug and t.task_index = 0;
  insert into engine.task_claims (claim_id, run_id, step_slug, task_index, attempt, queue_name,
                                  message_id, claimed_at, lease_expires_at, timeout, max_attempts,
                                  start_delay, state)
  values (v_claim_id, v2_take_over.run_id, v2_take_over.step_slug, 0, v_old.attempt + 1,
          v_old.queue_name, v_old.message_id, v_now, v_lease, v_old.timeout, v_old.max_attempts,
          v_old.start_delay, 'current');
  perform from pgmq.set_vt(v_task.queue_name, v_task.message_id, v_lease);
  if not found then
    raise exception 'run %, step %: message % is no longer in queue %', v2_take_over.run_id,
      v2_take_over.step_slug, v_task.message_id, v_task.queue_name
      using errcode = 'DR006';
  end if;

  return next row(v_claim_id, v2_take_over.run_id, v2_take_over.step_slug, 0, v_task.queue_name,
                  v_task.message_id, engine._task_input(v2_take_over.run_id, v2_take_over.step_slug),
                  v_lease)::engine.v2_grant;
end;
$$;


-- ----- 0650_function_v2_settle.sql
-- v2_settle: record the outcome of a claim, exactly once; replays get the recorded receipt.
-- Verdicts, decided in this order (so a replay after the run has finished is still replayed):
--   accepted  the claim is current and its task started: in one transaction the settlement
--             row, the task's terminal state and output, its step state's terminal state, the
--             claim settled, pgmq.archive of the claim's owned pair, requested_generation + 1.
--             'completed' does nothing else (no dependent step, no run completion); 'failed'
--             also fails the run (max attempts is 1), terminalizing every unfinished task.
--   replayed  a settlement exists with the same outcome and result: its receipt, no write.
--   conflict  a settlement exists with another outcome or result: its receipt, no write.
--   stale     the claim was revoked by a takeover: no write.
--   terminal  the run or task is terminal for another reason: no write.
-- stale and terminal receipts carry null outcome, result and settled_at and the run's current
-- requested generation. Settling is allowed under attention.
-- Locks: run (for no key update) -> work (for update) -> step states by step_slug -> the task
--   (for update; it covers its claims and settlements) -> the owned message (archive).
-- Refuses (nothing written): DR009 unknown outcome or SQL NULL result (JSON null is a result)
--   · DR002 result over 262 144 bytes · DR013 unknown claim.
create or replace function engine.v2_settle(claim_id uuid, outcome text, result jsonb)
returns engine.v2_receipt
language plpgsql security definer
set search_path = ''
as $$
declare
  v_limits jsonb := engine.v2_limits();
  v_now timestamptz;
  v_bytes integer;
  v_run_id uuid;
  v_run engine.runs;
  v_work engine.run_work;
  v_claim engine.task_claims;
  v_task engine.step_tasks;
  v_settlement engine.task_settlements;
begin
  if v2_settle.outcome is null or v2_settle.outcome not in ('completed', 'failed') then
    raise exception 'claim %: outcome % is neither completed nor failed', v2_settle.claim_id,
      pg_catalog.quote_nullable(v2_settle.outcome)
      using errcode = 'DR009';
  end if;
  if v2_settle.result is null then
    raise exception 'claim %: result is SQL NULL', v2_settle.claim_id
      using errcode = 'DR009', hint = 'Pass ''null''::jsonb for a JSON null result.';
  end if;
  v_bytes := pg_catalog.octet_length(v2_settle.result::text);
  if v_bytes > (v_limits ->> 'result_max_bytes')::integer then
    raise exception 'claim %: result has % bytes, more than %', v2_settle.claim_id, v_bytes,
      v_limits ->> 'result_max_bytes'
      using errcode = 'DR002';
  end if;
  select c.run_id into v_run_id from engine.task_claims as c where c.claim_id = v2_settle.claim_id;
  if v_run_id is null then
    raise exception 'unknown claim %', pg_catalog.quote_nullable(v2_settle.claim_id::text)
      using errcode = 'DR013';
  end if;

  select r.* into strict v_run from engine.runs as r where r.run_id = v_run_id for no key update;
  perform engine._hook('settle.after_run_lock');
  select w.* into strict v_work from engine.run_work as w where w.run_id = v_run_id for update;
  perform from engine.step_states as ss where ss.run_id = v_run_id order by ss.step_slug for update;
  select c.* into strict v_claim from engine.task_claims as c where c.claim_id = v2_settle.claim_id;
  select t.* into strict v_task
    from engine.step_tasks as t
   where t.run_id = v_claim.run_id and t.step_slug = v_claim.step_slug
     and t.task_index = v_claim.task_index
     for update;
  select s.* into v_settlement from engine.task_settlements as s where s.claim_id = v2_settle.claim_id;

  if v_claim.state = 'current' and v_task.status = 'started' and v_run.status = 'started'
     and v_settlement.claim_id is null then
    v_now := pg_catalog.clock_timestamp();
    update engine.run_work as w
       set requested_generation = w.requested_generation + 1
     where w.run_id = v_run_id
    returning w.* into v_work;
    insert into engine.task_settlements (claim_id, run_id, outcome, result, settled_at,
                                         requested_generation)
    values (v2_settle.claim_id, v_run_id, v2_settle.outcome, v2_settle.result, v_now,
            v_work.requested_generation)
    returning * into v_settlement;
    if v2_settle.outcome = 'completed' then
      update engine.step_tasks as t
         set status = 'completed', output = v2_settle.result, completed_at = v_now
       where t.run_id = v_claim.run_id and t.step_slug = v_claim.step_slug
         and t.task_index = v_claim.task_index;
      update engine.step_states as ss
         set status = 'completed', completed_at = v_now
       where ss.run_id = v_run_id and ss.step_slug = v_claim.step_slug;
    else
      update engine.step_tasks as t
         set status = 'failed', error_message = v2_settle.result::text, failed_at = v_now
       where t.run_id = v_claim.run_id and t.step_slug = v_claim.step_slug
         and t.task_index = v_claim.task_index;
      update engine.step_states as ss
         set status = 'failed', failed_at = v_now, error_message = v2_settle.result::text
       where ss.run_id = v_run_id and ss.step_slug = v_claim.step_slug;
    end if;
    update engine.task_claims as c set state = 'settled' where c.claim_id = v2_settle.claim_id;
    perform pgmq.archive(v_claim.queue_name, v_claim.message_id);
    if v2_settle.outcome = 'failed' then
      perform engine._fail_run(v_run_id, v_now);
    end if;
    return row('accepted', v_settlement.claim_id, v_settlement.outcome, v_settlement.result,
               v_settlement.requested_generation, v_settlement.settled_at)::engine.v2_receipt;
  end if;

  if v_settlement.claim_id is not null then
    return row(case when (v_settlement.outcome, v_settlement.result)
                         = (v2_settle.outcome, v2_settle.result)
                    then 'replayed' else 'conflict' end,
               v_settlement.claim_id, v_settlement.outcome, v_settlement.result,
               v_settlement.requested_generation, v_settlement.settled_at)::engine.v2_receipt;
  end if;
  return row(case when v_claim.state = 'revoked' then 'stale' else 'terminal' end,
             v2_settle.claim_id, null, null, v_work.requested_generation, null)::engine.v2_receipt;
end;
$$;


-- ----- 0660_function__v2_next_action.sql
-- _v2_next_action: the next immediate orchestration action of a v2 run, derived from
-- authoritative rows only (step states, tasks, the run), never from replayed counters:
--   'create_b'  A is completed and B's step state is still created: start B's step state and
--               create B's task (queued, its message not sent yet);
--   'send_b'    B's task exists without a message: send B's message to B's stored route with
--               B's start_delay and snapshot the pair;
--   'complete'  B is completed and the run is still started: complete the run;
--   null        nothing to do now (A or B still working, or the run is terminal).
-- Reads only; the caller holds the run, work and step state locks.
create or replace function engine._v2_next_action(run_id uuid)
returns text
language sql stable
set search_path = ''
as $$
  select case
    when r.status <> 'started' then null
    when b.status = 'created' and a.status = 'completed' then 'create_b'
    when b.status = 'started' and exists (
      select from engine.step_tasks as t
       where t.run_id = r.run_id and t.step_slug = b.step_slug and t.message_id is null
    ) then 'send_b'
    when b.status = 'completed' then 'complete'
  end
  from engine.runs as r
  join engine.steps as sa on sa.flow_slug = r.flow_slug and sa.deps_count = 0
  join engine.steps as sb on sb.flow_slug = r.flow_slug and sb.deps_count > 0
  join engine.step_states as a on a.run_id = r.run_id and a.step_slug = sa.step_slug
  join engine.step_states as b on b.run_id = r.run_id and b.step_slug = sb.step_slug
  where r.run_id = _v2_next_action.run_id;
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
  if v_run.definition_hash is distinct from engine._definition_hash(v_run.flow_slug) then
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
grant execute on function
  engine.v2_claim(uuid, text, text, bigint[]),
  engine.v2_settle(uuid, text, jsonb)
  to engine_worker;
grant execute on function
  engine.v2_limits(),
  engine.v2_start_run(text, jsonb),
  engine.v2_take_over(uuid, text, uuid, text, bigint[]),
  engine.v2_reconcile(uuid, integer)
  to engine_operator;
