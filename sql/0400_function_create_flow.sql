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
create function engine.create_flow(
  flow_slug text,
  max_attempts integer default 3,
  base_delay integer default 1,
  timeout integer default 60,
  queue_mode text default 'flow'
) returns engine.flows
language plpgsql security definer
set search_path = pg_catalog, pg_temp
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
