-- v2_listen: the calling session says it waits, idle, on `channel` ('engine_v2_dirty' for runs
-- that became dirty, 'engine_queue_<queue>' for new messages in one of the engine's queues); the
-- caller LISTENs on its own channel engine_wake_<pid> and reads once more before it waits (the
-- engine wakes one waiter per event and consumes its row). Rows of sessions that are gone are
-- swept here. Idempotent.
-- Locks: the channel's advisory lock (7200, hashtext(channel)) exclusive, so it waits for every
-- notifier of the channel in flight (they hold it shared to commit): the caller's peek, after
-- this commits, sees their work; a notifier that starts later sees this registration.
-- Writes: its own row of engine.listeners. Refuses: DR014 a channel that is not the engine's.
create function engine.v2_listen(channel text)
returns void
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
begin
  if v2_listen.channel is null
     or (v2_listen.channel <> 'engine_v2_dirty'
         and not exists (select from engine.steps as s
                          where 'engine_queue_' || s.queue_name = v2_listen.channel)) then
    raise exception 'unknown channel %', pg_catalog.quote_nullable(v2_listen.channel)
      using errcode = 'DR014',
            hint = 'Channels are engine_v2_dirty and engine_queue_<queue of a step>.';
  end if;
  perform pg_catalog.pg_advisory_xact_lock(7200, pg_catalog.hashtext(v2_listen.channel));
  delete from engine.listeners as l
   where l.channel = v2_listen.channel
     and not exists (select from pg_catalog.pg_stat_activity as a where a.pid = l.pid);
  insert into engine.listeners (channel, pid) values (v2_listen.channel, pg_catalog.pg_backend_pid())
  on conflict on constraint listeners_are_identified_by_channel_and_session do nothing;
end;
$$;
