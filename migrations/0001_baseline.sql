-- 0001_baseline.sql: the v1 engine baseline (flows, steps, runs, tasks, retries; one queue per
-- flow named by its slug). Generated once from sql/ by concatenating its files in order;
-- never edited after it was applied anywhere. Later changes are new files.

-- ===== sql/0000_schema_engine.sql
-- engine: the one schema that holds every object of ours. PUBLIC gets nothing here.
create schema engine;
revoke all on schema engine from public;
comment on schema engine is 'Workflow engine core: definitions, runs, tasks, Dirty Runs v2 protocol';

-- ===== sql/0010_roles.sql
-- Roles without login: engine_worker runs handlers, engine_operator runs everything else.
-- Roles are cluster-wide, so they are created only when missing; grants are per database.
do $$
begin
  if not exists (select from pg_catalog.pg_roles where rolname = 'engine_worker') then
    create role engine_worker nologin;
  end if;
  if not exists (select from pg_catalog.pg_roles where rolname = 'engine_operator') then
    create role engine_operator nologin;
  end if;
end;
$$;
grant usage on schema engine to engine_worker, engine_operator;

-- ===== sql/0020_table_schema_migrations.sql
-- schema_migrations: one row per applied migration file, written by the migration runner.
create table engine.schema_migrations (
  file_name text not null,
  sha256 text not null,
  applied_at timestamptz not null default clock_timestamp(),
  constraint schema_migrations_are_identified_by_file_name primary key (file_name),
  constraint migration_sha256_is_64_hex_digits check (sha256 ~ '^[0-9a-f]{64}$')
);

-- ===== sql/0100_table_flows.sql
-- flows: one row per flow definition; its options are the defaults of its steps.
create table engine.flows (
  flow_slug text not null,
  max_attempts integer not null default 3,
  base_delay integer not null default 1,
  timeout integer not null default 60,
  created_at timestamptz not null default clock_timestamp(),
  constraint flows_are_identified_by_slug primary key (flow_slug),
  constraint flow_slug_is_a_valid_slug
    check (flow_slug ~ '^[A-Za-z_][A-Za-z0-9_]*$' and length(flow_slug) <= 128),
  constraint flow_queue_name_fits_in_47_characters check (length(flow_slug) <= 47),
  constraint flow_max_attempts_is_at_least_one check (max_attempts >= 1),
  constraint flow_base_delay_is_not_negative check (base_delay >= 0),
  constraint flow_timeout_is_at_least_one_second check (timeout >= 1)
);

-- ===== sql/0110_table_steps.sql
-- steps: the steps of a flow in add_step order; null options inherit the flow's.
create table engine.steps (
  flow_slug text not null,
  step_slug text not null,
  step_index integer not null,
  deps_count integer not null default 0,
  max_attempts integer,
  base_delay integer,
  timeout integer,
  start_delay integer,
  created_at timestamptz not null default clock_timestamp(),
  constraint steps_are_identified_by_flow_and_slug primary key (flow_slug, step_slug),
  constraint step_index_is_unique_within_its_flow unique (flow_slug, step_index),
  constraint step_belongs_to_a_flow foreign key (flow_slug) references engine.flows (flow_slug),
  constraint step_slug_is_a_valid_slug
    check (step_slug ~ '^[A-Za-z_][A-Za-z0-9_]*$' and length(step_slug) <= 128),
  constraint step_slug_run_is_reserved_for_the_run_input check (step_slug <> 'run'),
  constraint step_index_is_not_negative check (step_index >= 0),
  constraint deps_count_is_not_negative check (deps_count >= 0),
  constraint step_max_attempts_is_at_least_one check (max_attempts >= 1),
  constraint step_base_delay_is_not_negative check (base_delay >= 0),
  constraint step_timeout_is_at_least_one_second check (timeout >= 1),
  constraint step_start_delay_is_not_negative check (start_delay >= 0)
);

-- ===== sql/0120_table_deps.sql
-- deps: step_slug depends on dep_slug; both are steps of the same flow, added dep first.
create table engine.deps (
  flow_slug text not null,
  dep_slug text not null,
  step_slug text not null,
  constraint deps_are_identified_by_flow_step_and_dep primary key (flow_slug, step_slug, dep_slug),
  constraint dependency_is_a_step_of_the_flow
    foreign key (flow_slug, dep_slug) references engine.steps (flow_slug, step_slug),
  constraint dependent_is_a_step_of_the_flow
    foreign key (flow_slug, step_slug) references engine.steps (flow_slug, step_slug),
  constraint step_never_depends_on_itself check (dep_slug <> step_slug)
);
create index deps_by_dependency on engine.deps (flow_slug, dep_slug);

-- ===== sql/0130_table_runs.sql
-- runs: one row per started flow run.
create table engine.runs (
  run_id uuid not null default gen_random_uuid(),
  flow_slug text not null,
  status text not null default 'started',
  input jsonb not null,
  output jsonb,
  remaining_steps integer not null,
  started_at timestamptz not null default clock_timestamp(),
  completed_at timestamptz,
  failed_at timestamptz,
  constraint runs_are_identified_by_run_id primary key (run_id),
  constraint run_belongs_to_a_flow foreign key (flow_slug) references engine.flows (flow_slug),
  constraint run_status_is_known check (status in ('started', 'completed', 'failed')),
  constraint remaining_steps_is_not_negative check (remaining_steps >= 0),
  constraint completed_run_has_completed_at check ((status = 'completed') = (completed_at is not null)),
  constraint failed_run_has_failed_at check ((status = 'failed') = (failed_at is not null))
);
create index runs_by_flow on engine.runs (flow_slug);
create index terminal_runs_by_age on engine.runs (coalesce(completed_at, failed_at))
  where status in ('completed', 'failed');

-- ===== sql/0140_table_step_states.sql
-- step_states: one row per step of a run.
create table engine.step_states (
  run_id uuid not null,
  step_slug text not null,
  flow_slug text not null,
  status text not null default 'created',
  remaining_deps integer not null,
  created_at timestamptz not null default clock_timestamp(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  error_message text,
  constraint step_states_are_identified_by_run_and_step primary key (run_id, step_slug),
  constraint step_state_belongs_to_a_run
    foreign key (run_id) references engine.runs (run_id) on delete cascade,
  constraint step_state_belongs_to_a_step
    foreign key (flow_slug, step_slug) references engine.steps (flow_slug, step_slug),
  constraint step_state_status_is_known
    check (status in ('created', 'started', 'completed', 'failed', 'cancelled')),
  constraint remaining_deps_is_not_negative check (remaining_deps >= 0)
);

-- ===== sql/0150_table_step_tasks.sql
-- step_tasks: the single task of a started step, and its message.
create table engine.step_tasks (
  run_id uuid not null,
  step_slug text not null,
  flow_slug text not null,
  task_index integer not null default 0,
  status text not null default 'queued',
  attempts_count integer not null default 0,
  message_id bigint,
  output jsonb,
  error_message text,
  queued_at timestamptz not null default clock_timestamp(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  constraint step_tasks_are_identified_by_run_step_and_index
    primary key (run_id, step_slug, task_index),
  constraint step_task_belongs_to_a_step_state
    foreign key (run_id, step_slug) references engine.step_states (run_id, step_slug)
    on delete cascade,
  constraint step_task_status_is_known
    check (status in ('queued', 'started', 'completed', 'failed', 'cancelled')),
  constraint task_index_is_zero_for_single_task_steps check (task_index = 0),
  constraint attempts_count_is_not_negative check (attempts_count >= 0)
);
create index step_tasks_by_flow_message on engine.step_tasks (flow_slug, message_id);
create index started_step_tasks on engine.step_tasks (started_at) where status = 'started';

-- ===== sql/0200_type_task_grant.sql
-- task_grant: what start_tasks hands to a v1 worker for each task it won.
create type engine.task_grant as (
  run_id uuid,
  step_slug text,
  task_index integer,
  queue_name text,
  message_id bigint,
  input jsonb
);

-- ===== sql/0300_function__is_valid_slug.sql
-- _is_valid_slug: the slug rule shared by flows and steps (spelling kept as given).
create function engine._is_valid_slug(slug text)
returns boolean
language sql immutable parallel safe
set search_path = ''
as $$
  select slug is not null
     and slug operator(pg_catalog.~) '^[A-Za-z_][A-Za-z0-9_]*$'
     and pg_catalog.length(slug) <= 128;
$$;

-- ===== sql/0310_function__task_message.sql
-- _task_message: the identity-only body of a task message; handler input never travels in it.
create function engine._task_message(protocol text, run_id uuid, step_slug text, task_index integer)
returns jsonb
language sql immutable parallel safe
set search_path = ''
as $$
  select pg_catalog.jsonb_build_object(
    'protocol', protocol,
    'run_id', run_id,
    'step_slug', step_slug,
    'task_index', task_index
  );
$$;

-- ===== sql/0320_function__task_input.sql
-- _task_input: handler input of a task. A root step gets the run input; a dependent step gets
-- {"run": <run input>, "<dep slug>": <dep output>, ...}.
-- Reads only; the caller holds the locks.
create function engine._task_input(run_id uuid, step_slug text)
returns jsonb
language sql stable
set search_path = ''
as $$
  select case
    when s.deps_count = 0 then r.input
    else pg_catalog.jsonb_build_object('run', r.input) operator(pg_catalog.||) coalesce(
      (select pg_catalog.jsonb_object_agg(d.dep_slug, t.output)
         from engine.deps as d
         join engine.step_tasks as t
           on t.run_id = r.run_id and t.step_slug = d.dep_slug and t.task_index = 0
        where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug),
      '{}'::jsonb)
  end
  from engine.runs as r
  join engine.steps as s on s.flow_slug = r.flow_slug
  where r.run_id = _task_input.run_id and s.step_slug = _task_input.step_slug;
$$;

-- ===== sql/0330_function__ensure_queue.sql
-- _ensure_queue: create a PGMQ queue the engine owns (when missing) and let engine_worker
-- read it and set its visibility. PGMQ's read and set_vt run with the caller's rights.
create function engine._ensure_queue(queue_name text)
returns void
language plpgsql
set search_path = ''
as $$
begin
  if not exists (
    select from pgmq.list_queues() as q
    where pg_catalog.lower(q.queue_name) = pg_catalog.lower(_ensure_queue.queue_name)
  ) then
    perform pgmq.create(_ensure_queue.queue_name);
  end if;
  execute pg_catalog.format(
    'grant select, update (vt, read_ct, last_read_at) on table pgmq.%I to engine_worker',
    'q_' || pg_catalog.lower(_ensure_queue.queue_name));
end;
$$;

-- ===== sql/0340_function__start_ready_steps.sql
-- _start_ready_steps: start every created step of a run whose dependencies have all completed.
-- Each such step state becomes started, its single task is created and its message is sent to
-- the flow's queue, delayed by the step's start_delay.
-- Locks: the run's step_states in step_slug order (the caller already holds the run).
-- Writes: step_states (started), step_tasks (queued, with message_id), one PGMQ message each.
create function engine._start_ready_steps(run_id uuid, now timestamptz)
returns integer
language plpgsql
set search_path = ''
as $$
declare
  v_step record;
  v_message_id bigint;
  v_started integer := 0;
begin
  for v_step in
    select ss.step_slug, ss.flow_slug, coalesce(s.start_delay, 0) as start_delay
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
        v_step.flow_slug,
        engine._task_message('v1', _start_ready_steps.run_id, v_step.step_slug, 0),
        _start_ready_steps.now + pg_catalog.make_interval(secs => v_step.start_delay)
      ) as m (msg_id);

    insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, message_id,
                                   queued_at)
    values (_start_ready_steps.run_id, v_step.step_slug, v_step.flow_slug, 0, 'queued',
            v_message_id, _start_ready_steps.now);

    v_started := v_started + 1;
  end loop;
  return v_started;
end;
$$;

-- ===== sql/0350_function__fail_run.sql
-- _fail_run: fail a started run and terminalize everything unfinished in it, so that no
-- sibling task is left queued or started on a failed run.
-- Locks: (the caller holds the run) step_states by step_slug -> step_tasks by
-- (step_slug, task_index) -> their messages by message_id.
-- Writes: runs (failed), step_states created/started -> cancelled, step_tasks queued/started
-- -> cancelled, and archives the cancelled tasks' messages.
create function engine._fail_run(run_id uuid, now timestamptz)
returns void
language plpgsql
set search_path = ''
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
    select t.flow_slug, t.message_id
      from engine.step_tasks as t
     where t.run_id = _fail_run.run_id and t.status in ('queued', 'started')
       and t.message_id is not null
     order by t.flow_slug, t.message_id
  loop
    perform pgmq.archive(v_task.flow_slug, v_task.message_id);
  end loop;
  update engine.step_tasks as t
     set status = 'cancelled', failed_at = _fail_run.now
   where t.run_id = _fail_run.run_id and t.status in ('queued', 'started');
end;
$$;

-- ===== sql/0400_function_create_flow.sql
-- create_flow: define a flow (its options are its steps' defaults) and create its queue.
-- Locks: the flow row (insert, or for update when it exists).
-- Refuses: DR001 invalid slug, default queue name over 47 characters or option out of range
--          · DR016 the flow exists with different options.
-- Writes: flows, one PGMQ queue named by the flow slug (when missing).
-- Defining the same flow again with identical options is a no-op that returns the row.
create function engine.create_flow(
  flow_slug text,
  max_attempts integer default 3,
  base_delay integer default 1,
  timeout integer default 60
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

  insert into engine.flows as f (flow_slug, max_attempts, base_delay, timeout)
  values (create_flow.flow_slug, create_flow.max_attempts, create_flow.base_delay,
          create_flow.timeout)
  on conflict on constraint flows_are_identified_by_slug do nothing
  returning f.* into v_flow;

  if v_flow.flow_slug is null then
    select f.* into strict v_flow
      from engine.flows as f
     where f.flow_slug = create_flow.flow_slug
       for update;
    if (v_flow.max_attempts, v_flow.base_delay, v_flow.timeout)
       is distinct from (create_flow.max_attempts, create_flow.base_delay, create_flow.timeout) then
      raise exception 'flow % already exists with different options', create_flow.flow_slug
        using errcode = 'DR016',
              detail = pg_catalog.format(
                'existing: max_attempts %s, base_delay %s, timeout %s; given: max_attempts %s, base_delay %s, timeout %s',
                v_flow.max_attempts, v_flow.base_delay, v_flow.timeout,
                create_flow.max_attempts, create_flow.base_delay, create_flow.timeout);
    end if;
    return v_flow;
  end if;

  perform engine._ensure_queue(create_flow.flow_slug);
  return v_flow;
end;
$$;

-- ===== sql/0410_function_add_step.sql
-- add_step: add a single-task step to a flow; its deps must already be steps of the flow, so a
-- cycle can only be a step naming itself.
-- Locks: definition (the flow row for update).
-- Refuses: DR014 unknown flow or dependency · DR001 invalid or reserved slug, null, duplicate
--          or self dependency, option out of range · DR016 the step exists with other options.
-- Writes: steps, deps.
-- Defining the same step again with identical options is a no-op that returns the row.
create function engine.add_step(
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
  v_step engine.steps;
  v_existing_deps text[];
  v_unknown text[];
begin
  perform from engine.flows as f where f.flow_slug = add_step.flow_slug for update;
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

  insert into engine.steps as s (flow_slug, step_slug, step_index, deps_count, max_attempts,
                                 base_delay, timeout, start_delay)
  values (add_step.flow_slug, add_step.step_slug,
          (select pg_catalog.count(*) from engine.steps as s2 where s2.flow_slug = add_step.flow_slug),
          pg_catalog.cardinality(v_deps), add_step.max_attempts, add_step.base_delay,
          add_step.timeout, add_step.start_delay)
  returning s.* into v_step;

  insert into engine.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, x, add_step.step_slug from pg_catalog.unnest(v_deps) as x;

  return v_step;
end;
$$;

-- ===== sql/0420_function_delete_flow.sql
-- delete_flow: remove a flow with its runs, tasks and queue (messages dropped with the queue,
-- no per-message archive first).
-- Locks: definition (the flow row for update) -> its runs (for update).
-- Refuses: DR014 unknown flow.
-- Writes: deletes runs (with step_states and step_tasks), deps, steps, the flow; drops its queue.
create function engine.delete_flow(flow_slug text)
returns void
language plpgsql security definer
set search_path = ''
as $$
begin
  perform from engine.flows as f where f.flow_slug = delete_flow.flow_slug for update;
  if not found then
    raise exception 'unknown flow %', pg_catalog.quote_nullable(delete_flow.flow_slug)
      using errcode = 'DR014';
  end if;

  perform from engine.runs as r where r.flow_slug = delete_flow.flow_slug order by r.run_id for update;
  delete from engine.runs as r where r.flow_slug = delete_flow.flow_slug;
  delete from engine.deps as d where d.flow_slug = delete_flow.flow_slug;
  delete from engine.steps as s where s.flow_slug = delete_flow.flow_slug;
  delete from engine.flows as f where f.flow_slug = delete_flow.flow_slug;

  if exists (select from pgmq.list_queues() as q
              where pg_catalog.lower(q.queue_name) = pg_catalog.lower(delete_flow.flow_slug)) then
    perform pgmq.drop_queue(delete_flow.flow_slug);
  end if;
end;
$$;

-- ===== sql/0500_function_start_flow.sql
-- start_flow: start a v1 run of a flow; its root steps are queued before it returns.
-- Locks: definition (the flow row for share) -> the new run -> its step_states.
-- Refuses: DR014 unknown flow · DR009 input is SQL NULL (JSON null is fine).
-- Writes: runs, step_states (one per step), step_tasks and messages of the root steps.
create function engine.start_flow(flow_slug text, input jsonb)
returns uuid
language plpgsql security definer
set search_path = ''
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

-- ===== sql/0510_function_start_tasks.sql
-- start_tasks: a v1 worker claims the queued tasks behind the messages it has read.
-- Only rows that the guarded UPDATE ... RETURNING actually changed are granted, so two
-- sessions claiming one message get one winner. Each winner's message becomes invisible
-- until the effective step timeout + 2 s. Unknown message ids are ignored (no grant, no write).
-- Locks: candidate step_tasks by (run_id, step_slug, task_index) -> their messages.
-- Writes: step_tasks (started, attempts_count + 1), the winners' message vt.
create function engine.start_tasks(queue_name text, message_ids bigint[])
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
             where c.flow_slug = start_tasks.queue_name
               and c.message_id = any (start_tasks.message_ids)
               and c.status = 'queued'
               and r.status = 'started'
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
    returning t.run_id, t.step_slug, t.task_index, t.flow_slug, t.message_id,
              coalesce(s.timeout, f.timeout) as timeout
  loop
    perform pgmq.set_vt(v_task.flow_slug, v_task.message_id,
                        v_now + pg_catalog.make_interval(secs => v_task.timeout + 2));
    return next row(v_task.run_id, v_task.step_slug, v_task.task_index, v_task.flow_slug,
                    v_task.message_id, engine._task_input(v_task.run_id, v_task.step_slug)
                   )::engine.task_grant;
  end loop;
end;
$$;

-- ===== sql/0520_function_complete_task.sql
-- complete_task: a v1 worker reports a handler result; the cascade starts dependents whose
-- dependencies are now all completed and completes the run after its last step.
-- The output is stored exactly as given (JSON null, 0, false, "", [] and {} included).
-- A task that is no longer started (its run failed meanwhile, or it was completed or
-- requeued) is left as it is and returned unchanged.
-- Locks: run (for update) -> step_states by step_slug -> the task -> its message.
-- Refuses: DR014 unknown run or task · DR009 output is SQL NULL.
-- Writes: step_tasks (completed), archives its message, step_states (completed; dependents'
--         remaining_deps - 1), runs (remaining_steps - 1; completed with the leaf outputs),
--         dependents' tasks and messages.
create function engine.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb)
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

  select r.* into v_run from engine.runs as r where r.run_id = complete_task.run_id for update;
  if not found then
    raise exception 'unknown run %', complete_task.run_id using errcode = 'DR014';
  end if;

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

  perform pgmq.archive(v_task.flow_slug, v_task.message_id);

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

-- ===== sql/0530_function_fail_task.sql
-- fail_task: a v1 worker reports a handler failure. While attempts remain the task is queued
-- again and its message becomes visible after base_delay * 2^(attempts - 1) seconds; the last
-- failure fails the step and the run, and terminalizes every unfinished task of the run.
-- A task that is no longer started is left as it is and returned unchanged.
-- Locks: run (for update) -> step_states by step_slug -> the task -> messages.
-- Refuses: DR014 unknown run or task.
-- Writes: step_tasks, its message (vt on retry, archive on the last failure), step_states and
--         runs on the last failure.
create function engine.fail_task(run_id uuid, step_slug text, task_index integer, error_message text)
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
  select r.* into v_run from engine.runs as r where r.run_id = fail_task.run_id for update;
  if not found then
    raise exception 'unknown run %', fail_task.run_id using errcode = 'DR014';
  end if;

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
      v_task.flow_slug, v_task.message_id,
      v_now + pg_catalog.make_interval(
        secs => v_base_delay * pg_catalog.power(2, v_task.attempts_count - 1)));
    return v_task;
  end if;

  update engine.step_tasks as t
     set status = 'failed', error_message = fail_task.error_message, failed_at = v_now
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
  returning t.* into v_task;
  perform pgmq.archive(v_task.flow_slug, v_task.message_id);

  update engine.step_states as ss
     set status = 'failed', failed_at = v_now, error_message = fail_task.error_message
   where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug;

  perform engine._fail_run(fail_task.run_id, v_now);
  return v_task;
end;
$$;

-- ===== sql/0540_function_requeue_stalled_tasks.sql
-- requeue_stalled_tasks: recover v1 tasks whose worker went silent. A started task whose
-- started_at + effective step timeout + 2 s has passed is queued again and its message made
-- visible now; a stalled task that has used its last attempt fails with its run instead.
-- Locks: per task, run (for update) -> step_states by step_slug -> the task -> its message.
-- Writes: step_tasks, message vt (requeue) or archive (last attempt), step_states and runs on
--         the last attempt.
-- Returns the number of tasks queued again.
create function engine.requeue_stalled_tasks()
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
      perform pgmq.set_vt(v_task.flow_slug, v_task.message_id, v_now);
      v_requeued := v_requeued + 1;
    else
      update engine.step_tasks as t
         set status = 'failed', failed_at = v_now, error_message = v_error
       where t.run_id = v_task.run_id and t.step_slug = v_task.step_slug
         and t.task_index = v_task.task_index;
      perform pgmq.archive(v_task.flow_slug, v_task.message_id);
      update engine.step_states as ss
         set status = 'failed', failed_at = v_now, error_message = v_error
       where ss.run_id = v_task.run_id and ss.step_slug = v_task.step_slug;
      perform engine._fail_run(v_task.run_id, v_now);
    end if;
  end loop;
  return v_requeued;
end;
$$;

-- ===== sql/0550_function_prune_data_older_than.sql
-- prune_data_older_than: delete terminal runs (with their step_states and step_tasks) that
-- ended before now - retention, and archived messages older than that from the archive
-- tables of the queues the engine owns. Non-terminal runs are never touched.
-- Locks: the pruned runs (row locks taken by the delete).
-- Refuses: DR008 retention is null or negative.
-- Writes: deletes runs, step_states, step_tasks, and rows of pgmq.a_<queue> of engine queues.
-- Returns the number of runs pruned.
create function engine.prune_data_older_than(retention interval)
returns integer
language plpgsql security definer
set search_path = ''
as $$
declare
  v_cutoff timestamptz;
  v_pruned integer;
  v_queue text;
begin
  if prune_data_older_than.retention is null or prune_data_older_than.retention < interval '0' then
    raise exception 'retention % is out of range', pg_catalog.quote_nullable(prune_data_older_than.retention::text)
      using errcode = 'DR008', hint = 'Pass a non-negative interval, for example interval ''7 days''.';
  end if;
  v_cutoff := pg_catalog.clock_timestamp() - prune_data_older_than.retention;

  delete from engine.runs as r
   where r.status in ('completed', 'failed')
     and coalesce(r.completed_at, r.failed_at) < v_cutoff;
  get diagnostics v_pruned = row_count;

  for v_queue in
    select pg_catalog.lower(f.flow_slug) from engine.flows as f order by 1
  loop
    if pg_catalog.to_regclass(pg_catalog.format('pgmq.%I', 'a_' || v_queue)) is not null then
      execute pg_catalog.format('delete from pgmq.%I as a where a.archived_at < $1', 'a_' || v_queue)
        using v_cutoff;
    end if;
  end loop;
  return v_pruned;
end;
$$;

-- ===== sql/9900_privileges.sql
-- Privileges: nothing in schema engine is usable by PUBLIC. engine_worker executes only what a
-- worker needs; engine_operator executes everything else that is public API. Internal helpers
-- (names starting with _) are executed only through the security definer functions.
revoke all on all functions in schema engine from public;
revoke all on all tables in schema engine from public;
grant usage on schema pgmq to engine_worker;
grant execute on function
  engine.start_tasks(text, bigint[]),
  engine.complete_task(uuid, text, integer, jsonb),
  engine.fail_task(uuid, text, integer, text)
  to engine_worker;
grant execute on function
  engine.create_flow(text, integer, integer, integer),
  engine.add_step(text, text, text[], integer, integer, integer, integer),
  engine.delete_flow(text),
  engine.start_flow(text, jsonb),
  engine.requeue_stalled_tasks(),
  engine.prune_data_older_than(interval)
  to engine_operator;

