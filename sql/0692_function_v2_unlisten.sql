-- v2_unlisten: the calling session no longer waits on `channel` (it is busy again), or on any
-- channel when `channel` is null. Writes: its own rows of engine.listeners.
create function engine.v2_unlisten(channel text default null)
returns void
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
begin
  delete from engine.listeners as l
   where l.pid = pg_catalog.pg_backend_pid()
     and (v2_unlisten.channel is null or l.channel = v2_unlisten.channel);
end;
$$;
