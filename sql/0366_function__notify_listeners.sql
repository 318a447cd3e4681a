-- _notify_listeners: wake the sessions waiting on `channel`, if any are (a notification nobody
-- waits for is not sent: under load no transaction pays NOTIFY's commit-time lock).
-- Reads only engine.listeners (no lock); the notification is delivered at commit.
create function engine._notify_listeners(channel text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if exists (select from engine.listeners as l where l.channel = _notify_listeners.channel) then
    perform pg_catalog.pg_notify(_notify_listeners.channel, '');
  end if;
end;
$$;
