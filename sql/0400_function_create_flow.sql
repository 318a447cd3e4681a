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
