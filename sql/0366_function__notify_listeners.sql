-- _notify_listeners: wake ONE session waiting on `channel`: the one waiting longest. Its
-- registration is consumed (the row is deleted) and the notification goes to that session's own
-- channel, engine_wake_<pid>, with `channel` as the payload: one message wakes one idle worker,
-- not every idle worker of the queue (no thundering herd of empty reads). A woken session
-- registers again with v2_listen when it is idle again. Nobody waiting: nothing is sent and no
-- row is locked (one index probe finds none; notifiers share the advisory lock below), so under
-- load no transaction pays the commit-time lock NOTIFY takes. A row of a session that is gone is
-- consumed like any other (one wake-up lost, covered by the waiters' fallback poll) or swept by
-- v2_listen.
-- Locks: last in the caller's order: the channel's advisory lock (7200, hashtext(channel)) shared,
-- held to commit, so a session registering with v2_listen (which takes it exclusive) waits for
-- this transaction and then sees its work when it peeks: no event falls between a notifier that
-- saw no listener and a waiter that looked before the notifier committed. Then one
-- engine.listeners row FOR UPDATE SKIP LOCKED (a row another notifier holds is passed over).
-- The notification is delivered at commit.
create function engine._notify_listeners(channel text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_pid integer;
begin
  perform pg_catalog.pg_advisory_xact_lock_shared(7200, pg_catalog.hashtext(_notify_listeners.channel));
  delete from engine.listeners as l
   where (l.channel, l.pid) = (
           select w.channel, w.pid
             from engine.listeners as w
            where w.channel = _notify_listeners.channel
            order by w.listening_since, w.pid
            limit 1
              for update skip locked)
  returning l.pid into v_pid;
  if v_pid is not null then
    perform pg_catalog.pg_notify('engine_wake_' || v_pid, _notify_listeners.channel);
  end if;
end;
$$;
