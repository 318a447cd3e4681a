-- listeners: the sessions that are waiting, idle, for a wake-up on a channel (LISTEN). The engine
-- sends a notification only to a channel someone is waiting on: a busy pool gets none, so no
-- transaction pays the commit-time lock that NOTIFY takes (it serializes notifying commits).
-- A row is the session's own (pid); rows of sessions that are gone are swept by v2_listen.
create table engine.listeners (
  channel text not null,
  pid integer not null,
  listening_since timestamptz not null default clock_timestamp(),
  constraint listeners_are_identified_by_channel_and_session primary key (channel, pid),
  constraint listener_channel_is_an_engine_channel
    check (channel = 'engine_v2_dirty' or channel ~ '^engine_queue_[a-z_][a-z0-9_]*$')
);
