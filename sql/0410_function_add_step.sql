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
set search_path = pg_catalog, pg_temp
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
