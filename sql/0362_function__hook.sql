-- _hook: a test hook that does nothing unless the session setting engine.hooks names its point.
-- engine.hooks is a comma-separated list; 'point' makes the point wait, 'point:fail' makes it
-- fail. Waiting raises a NOTICE, then takes and at once releases a shared advisory lock
-- (7001, _hook_key(point)), so a controller holding that lock exclusively parks the session
-- here, visibly in pg_locks. Failing raises SQLSTATE DR900. Unarmed it reads one setting and
-- returns: no lock, no write.
create function engine._hook(point text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
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
