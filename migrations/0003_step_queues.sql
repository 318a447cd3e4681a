-- 0003_step_queues.sql: private per-step queues (CONTRACT section 1).
-- flows.queue_mode 'flow' (plain: every step routes to lower(flow_slug)) or 'step' (a private
-- queue per step, named by engine._step_queue_name). Queue mode and routes are deployment
-- metadata, separate from the DAG shape. Existing flows are plain.

alter table engine.flows add column queue_mode text not null default 'flow';
alter table engine.flows add constraint flow_queue_mode_is_flow_or_step
  check (queue_mode in ('flow', 'step'));

drop function engine.create_flow(text, integer, integer, integer);


-- ----- 0305_function__step_queue_name.sql
-- _step_queue_name: the private queue of a step in a step-queued flow.
-- lower(flow) || '__' || lower(step) when that has at most 47 characters (PGMQ's limit);
-- otherwise the flow name cut to fit before the suffix '__' || step_index.
create or replace function engine._step_queue_name(flow_slug text, step_slug text, step_index integer)
returns text
language sql immutable parallel safe
set search_path = ''
as $$
  select case
    when pg_catalog.length(pg_catalog.lower(flow_slug) || '__' || pg_catalog.lower(step_slug)) <= 47
      then pg_catalog.lower(flow_slug) || '__' || pg_catalog.lower(step_slug)
    else pg_catalog.left(pg_catalog.lower(flow_slug),
                         47 - pg_catalog.length('__' || step_index::text)) || '__' || step_index::text
  end;
$$;


-- ----- 0335_function__reserve_queue_name.sql
-- _reserve_queue_name: check that flow_slug may use queue_name before anything is written.
-- A name is taken when another flow reserves it (its default lower(flow_slug)) or routes to
-- it, or when PGMQ already has a queue of that name (compared lower-cased) that is not this
-- flow's own route.
-- Locks: a transaction advisory lock on the name (key space 7100) so that concurrent
-- definitions of colliding names serialize.
-- Refuses: DR012 naming the queue, the flow that wants it and who holds it.
create or replace function engine._reserve_queue_name(flow_slug text, queue_name text)
returns void
language plpgsql
set search_path = ''
as $$
declare
  v_name text := pg_catalog.lower(_reserve_queue_name.queue_name);
  v_holder text;
begin
  perform pg_catalog.pg_advisory_xact_lock(7100, pg_catalog.hashtext(v_name));

  select f.flow_slug into v_holder
    from engine.flows as f
   where pg_catalog.lower(f.flow_slug) = v_name and f.flow_slug <> _reserve_queue_name.flow_slug
   limit 1;
  if v_holder is null then
    select s.flow_slug into v_holder
      from engine.steps as s
     where s.queue_name = v_name and s.flow_slug <> _reserve_queue_name.flow_slug
     limit 1;
  end if;
  if v_holder is not null then
    raise exception 'queue name % wanted by flow % is taken by flow %',
      v_name, _reserve_queue_name.flow_slug, v_holder
      using errcode = 'DR012';
  end if;

  if exists (select from pgmq.list_queues() as q where pg_catalog.lower(q.queue_name) = v_name)
     and not exists (select from engine.steps as s
                      where s.flow_slug = _reserve_queue_name.flow_slug and s.queue_name = v_name)
     and not exists (select from engine.flows as f
                      where f.flow_slug = _reserve_queue_name.flow_slug and f.queue_mode = 'flow'
                        and pg_catalog.lower(f.flow_slug) = v_name) then
    raise exception 'queue % wanted by flow % already exists in PGMQ and is not owned by that flow',
      v_name, _reserve_queue_name.flow_slug
      using errcode = 'DR012',
            hint = 'Drop or rename the other queue, or give the flow another slug.';
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
--          · DR012 the private queue name is taken.
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
-- Refuses: DR014 unknown flow.
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


-- ----- 0550_function_prune_data_older_than.sql
-- prune_data_older_than: delete terminal runs (with their step_states and step_tasks) that
-- ended before now - retention, and archived messages older than that from the archive
-- tables of the queues the engine routes to (step routes and plain flows' queues).
-- Non-terminal runs are never touched.
-- Locks: the pruned runs (row locks taken by the delete).
-- Refuses: DR008 retention is null or negative.
-- Writes: deletes runs, step_states, step_tasks, and rows of pgmq.a_<queue> of engine queues.
-- Returns the number of runs pruned.
create or replace function engine.prune_data_older_than(retention interval)
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
    select s.queue_name from engine.steps as s
    union
    select pg_catalog.lower(f.flow_slug) from engine.flows as f where f.queue_mode = 'flow'
    order by 1
  loop
    if pg_catalog.to_regclass(pg_catalog.format('pgmq.%I', 'a_' || v_queue)) is not null then
      execute pg_catalog.format('delete from pgmq.%I as a where a.archived_at < $1', 'a_' || v_queue)
        using v_cutoff;
    end if;
  end loop;
  return v_pruned;
end;
$$;


-- ----- privileges
revoke all on all functions in schema engine from public;
grant execute on function engine.create_flow(text, integer, integer, integer, text) to engine_operator;
