-- _now: the engine's clock for v2 decisions (claimed_at, lease horizons, settled_at, backoff).
-- It is clock_timestamp() unless the session setting engine.clock_offset names an interval: a
-- test-only clock that lets evidence move time forward (a lease expires without waiting for it).
-- Like the hooks it lives in the artifact and is inert when unset (a test proves it); only a
-- superuser session may set it, so a worker or operator login can never stretch its own lease.
-- Refuses: 42501 engine.clock_offset set by a session that is not superuser.
create function engine._now()
returns timestamptz
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  v_offset text := pg_catalog.current_setting('engine.clock_offset', true);
begin
  if v_offset is null or v_offset = '' then
    return pg_catalog.clock_timestamp();
  end if;
  if not (select r.rolsuper from pg_catalog.pg_roles as r where r.rolname = session_user) then
    raise exception 'engine.clock_offset is a test clock: only a superuser session may set it (session user %)',
      session_user
      using errcode = 'insufficient_privilege';
  end if;
  return pg_catalog.clock_timestamp() + v_offset::interval;
end;
$$;
