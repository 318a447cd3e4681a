-- 0015_wakeups_and_reconcile_next.sql: throughput at scale (issue 26).
-- * engine.listeners and engine._notify_listeners: a notification is sent only when an idle
--   session waits on the channel (v2_listen / v2_unlisten), to one of them (the longest waiting,
--   on its own channel engine_wake_<pid>, its registration consumed); a busy pool gets none, so no
--   commit pays the lock NOTIFY takes at commit. v2_start_run wakes A's queue, v2_reconcile B's
--   when it dispatches B, an accepted v2_settle the reconcilers (engine_v2_dirty).
-- * engine.v2_reconcile_next(max_actions, skip): the next due run that no other session holds
--   (FOR NO KEY UPDATE SKIP LOCKED on the run, the first lock of the order), reconciled exactly as
--   v2_reconcile: reconcilers side by side share the work; one run per call, one transaction.
-- Nothing existing changes behaviour: the three functions only gain the notification.

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
create or replace function engine._notify_listeners(channel text)
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

-- v2_start_run: admit and start a Dirty Runs v2 run of an A -> B flow.
-- Locks: definition (the flow row for share) -> the new run -> its work row -> step states.
-- Refuses, before any run, work row, task or message exists:
--   DR014 unknown flow · DR001 a shape or option outside the envelope (v2_limits()):
--   not exactly two steps, not one root A with B depending on A only, effective max_attempts
--   not 1, effective timeout outside 1..900 s, A's start_delay not 0, B's outside 0..3600 s
--   · DR009 input is SQL NULL · DR002 input over 65 536 bytes.
-- Writes, in one transaction: runs (protocol 'v2', definition_hash), run_work (0/0, clean),
--   step_states (A started, B created), A's task (queued) and A's message in A's route.
--   B has no task and no message. Wakes the workers waiting on A's queue (engine_queue_<queue>).
create or replace function engine.v2_start_run(flow_slug text, input jsonb)
returns uuid
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_limits engine.v2_envelope := engine._v2_envelope();
  v_now timestamptz := engine._now();
  v_run_id uuid := pg_catalog.gen_random_uuid();
  v_steps integer;
  v_a record;
  v_b record;
  v_bytes integer;
  v_message_id bigint;
begin
  perform from engine.flows as f where f.flow_slug = v2_start_run.flow_slug for share;
  if not found then
    raise exception 'unknown flow %', pg_catalog.quote_nullable(v2_start_run.flow_slug)
      using errcode = 'DR014';
  end if;
  perform engine._hook('start.after_definition_lock');

  -- the whole envelope, before anything is written
  select pg_catalog.count(*) into v_steps from engine.steps as s where s.flow_slug = v2_start_run.flow_slug;
  if v_steps <> v_limits.steps then
    raise exception 'flow % has % step(s); a v2 flow has exactly % (A -> B)',
      v2_start_run.flow_slug, v_steps, v_limits.steps
      using errcode = 'DR001';
  end if;
  select s.step_slug, s.queue_name, coalesce(s.max_attempts, f.max_attempts) as max_attempts,
         coalesce(s.timeout, f.timeout) as timeout, coalesce(s.start_delay, 0) as start_delay
    into v_a
    from engine.steps as s join engine.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v2_start_run.flow_slug and s.deps_count = 0;
  select s.step_slug, s.queue_name, coalesce(s.max_attempts, f.max_attempts) as max_attempts,
         coalesce(s.timeout, f.timeout) as timeout, coalesce(s.start_delay, 0) as start_delay,
         (select pg_catalog.array_agg(d.dep_slug) from engine.deps as d
           where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug) as deps
    into v_b
    from engine.steps as s join engine.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v2_start_run.flow_slug and s.deps_count > 0;
  if v_a.step_slug is null or v_b.step_slug is null or v_b.deps is distinct from array[v_a.step_slug] then
    raise exception 'flow % is not A -> B: one root step A and one step B that depends on A only',
      v2_start_run.flow_slug
      using errcode = 'DR001';
  end if;
  if v_a.max_attempts <> v_limits.max_attempts
     or v_b.max_attempts <> v_limits.max_attempts then
    raise exception 'flow %: effective max_attempts must be % (%: %, %: %)', v2_start_run.flow_slug,
      v_limits.max_attempts, v_a.step_slug, v_a.max_attempts, v_b.step_slug, v_b.max_attempts
      using errcode = 'DR001';
  end if;
  if least(v_a.timeout, v_b.timeout) < v_limits.timeout_min_seconds
     or greatest(v_a.timeout, v_b.timeout) > v_limits.timeout_max_seconds then
    raise exception 'flow %: effective timeout must be within % .. % s (%: %, %: %)',
      v2_start_run.flow_slug, v_limits.timeout_min_seconds, v_limits.timeout_max_seconds,
      v_a.step_slug, v_a.timeout, v_b.step_slug, v_b.timeout
      using errcode = 'DR001';
  end if;
  if v_a.start_delay <> v_limits.start_delay_a_seconds then
    raise exception 'flow %: root step % must have start_delay %, not %', v2_start_run.flow_slug,
      v_a.step_slug, v_limits.start_delay_a_seconds, v_a.start_delay
      using errcode = 'DR001';
  end if;
  if v_b.start_delay not between v_limits.start_delay_b_min_seconds
                             and v_limits.start_delay_b_max_seconds then
    raise exception 'flow %: step % start_delay % is outside % .. % s', v2_start_run.flow_slug,
      v_b.step_slug, v_b.start_delay, v_limits.start_delay_b_min_seconds,
      v_limits.start_delay_b_max_seconds
      using errcode = 'DR001';
  end if;
  if v2_start_run.input is null then
    raise exception 'flow %: run input is SQL NULL', v2_start_run.flow_slug
      using errcode = 'DR009', hint = 'Pass ''null''::jsonb for a JSON null input.';
  end if;
  v_bytes := pg_catalog.octet_length(v2_start_run.input::text);
  if v_bytes > v_limits.input_max_bytes then
    raise exception 'flow %: run input has % bytes, more than %', v2_start_run.flow_slug, v_bytes,
      v_limits.input_max_bytes
      using errcode = 'DR002';
  end if;

  insert into engine.runs (run_id, flow_slug, status, input, remaining_steps, started_at, protocol,
                           definition_hash)
  values (v_run_id, v2_start_run.flow_slug, 'started', v2_start_run.input, v_steps, v_now, 'v2',
          (select f.definition_hash from engine.flows as f where f.flow_slug = v2_start_run.flow_slug));
  insert into engine.run_work (run_id) values (v_run_id);
  insert into engine.step_states (run_id, step_slug, flow_slug, status, remaining_deps, created_at,
                                  started_at)
  values (v_run_id, v_a.step_slug, v2_start_run.flow_slug, 'started', 0, v_now, v_now),
         (v_run_id, v_b.step_slug, v2_start_run.flow_slug, 'created', 1, v_now, null);

  select m.msg_id into strict v_message_id
    from pgmq.send(v_a.queue_name,
                   engine._task_message('v2', v_run_id, v_a.step_slug, 0),
                   v_now) as m (msg_id);
  insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, queue_name,
                                 message_id, queued_at)
  values (v_run_id, v_a.step_slug, v2_start_run.flow_slug, 0, 'queued', v_a.queue_name,
          v_message_id, v_now);
  perform engine._notify_listeners('engine_queue_' || v_a.queue_name);
  return v_run_id;
end;
$$;

-- v2_settle: record the outcome of a claim, exactly once; replays get the recorded receipt.
-- Verdicts, decided in this order (so a replay after the run has finished is still replayed):
--   accepted  the claim is current and its task started: in one transaction the settlement
--             row, the task's terminal state and output, its step state's terminal state, the
--             claim settled, pgmq.archive of the claim's owned pair, requested_generation + 1.
--             'completed' does nothing else (no dependent step, no run completion); 'failed'
--             also fails the run (max attempts is 1), terminalizing every unfinished task.
--   replayed  a settlement exists with the same outcome and result: its receipt, no write.
--   conflict  a settlement exists with another outcome or result: its receipt, no write.
--   stale     the claim was revoked by a takeover: no write.
--   terminal  the run or task is terminal for another reason: no write.
-- An accepted settlement wakes the reconcilers waiting on engine_v2_dirty (if any wait).
-- stale and terminal receipts carry null outcome, result and settled_at and the run's current
-- requested generation. Settling is allowed under attention.
-- Locks: run (for no key update) -> work (for update) -> step states by step_slug -> the task
--   (for update; it covers its claims and settlements) -> the owned message (archive).
-- Refuses (nothing written): DR009 unknown outcome or SQL NULL result (JSON null is a result)
--   · DR002 result over 262 144 bytes · DR013 unknown claim.
create or replace function engine.v2_settle(claim_id uuid, outcome text, result jsonb)
returns engine.v2_receipt
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_limits engine.v2_envelope := engine._v2_envelope();
  v_now timestamptz;
  v_bytes integer;
  v_run_id uuid;
  v_run engine.runs;
  v_work engine.run_work;
  v_claim engine.task_claims;
  v_task engine.step_tasks;
  v_settlement engine.task_settlements;
begin
  if v2_settle.outcome is null or v2_settle.outcome not in ('completed', 'failed') then
    raise exception 'claim %: outcome % is neither completed nor failed', v2_settle.claim_id,
      pg_catalog.quote_nullable(v2_settle.outcome)
      using errcode = 'DR009';
  end if;
  if v2_settle.result is null then
    raise exception 'claim %: result is SQL NULL', v2_settle.claim_id
      using errcode = 'DR009', hint = 'Pass ''null''::jsonb for a JSON null result.';
  end if;
  v_bytes := pg_catalog.octet_length(v2_settle.result::text);
  if v_bytes > v_limits.result_max_bytes then
    raise exception 'claim %: result has % bytes, more than %', v2_settle.claim_id, v_bytes,
      v_limits.result_max_bytes
      using errcode = 'DR002';
  end if;
  select c.run_id into v_run_id from engine.task_claims as c where c.claim_id = v2_settle.claim_id;
  if v_run_id is null then
    raise exception 'unknown claim %', pg_catalog.quote_nullable(v2_settle.claim_id::text)
      using errcode = 'DR013';
  end if;

  select r.* into strict v_run from engine.runs as r where r.run_id = v_run_id for no key update;
  perform engine._hook('settle.after_run_lock');
  select w.* into strict v_work from engine.run_work as w where w.run_id = v_run_id for update;
  perform from engine.step_states as ss where ss.run_id = v_run_id order by ss.step_slug for update;
  select c.* into strict v_claim from engine.task_claims as c where c.claim_id = v2_settle.claim_id;
  select t.* into strict v_task
    from engine.step_tasks as t
   where t.run_id = v_claim.run_id and t.step_slug = v_claim.step_slug
     and t.task_index = v_claim.task_index
     for update;
  select s.* into v_settlement from engine.task_settlements as s where s.claim_id = v2_settle.claim_id;

  if v_claim.state = 'current' and v_task.status = 'started' and v_run.status = 'started'
     and v_settlement.claim_id is null then
    v_now := engine._now();
    update engine.run_work as w
       set requested_generation = w.requested_generation + 1
     where w.run_id = v_run_id
    returning w.* into v_work;
    perform engine._notify_listeners('engine_v2_dirty');
    insert into engine.task_settlements (claim_id, run_id, outcome, result, settled_at,
                                         requested_generation)
    values (v2_settle.claim_id, v_run_id, v2_settle.outcome, v2_settle.result, v_now,
            v_work.requested_generation)
    returning * into v_settlement;
    if v2_settle.outcome = 'completed' then
      update engine.step_tasks as t
         set status = 'completed', output = v2_settle.result, completed_at = v_now
       where t.run_id = v_claim.run_id and t.step_slug = v_claim.step_slug
         and t.task_index = v_claim.task_index;
      update engine.step_states as ss
         set status = 'completed', completed_at = v_now
       where ss.run_id = v_run_id and ss.step_slug = v_claim.step_slug;
    else
      update engine.step_tasks as t
         set status = 'failed', error_message = v2_settle.result::text, failed_at = v_now
       where t.run_id = v_claim.run_id and t.step_slug = v_claim.step_slug
         and t.task_index = v_claim.task_index;
      update engine.step_states as ss
         set status = 'failed', failed_at = v_now, error_message = v2_settle.result::text
       where ss.run_id = v_run_id and ss.step_slug = v_claim.step_slug;
    end if;
    update engine.task_claims as c set state = 'settled' where c.claim_id = v2_settle.claim_id;
    perform pgmq.archive(v_claim.queue_name, v_claim.message_id);
    if v2_settle.outcome = 'failed' then
      perform engine._fail_run(v_run_id, v_now);
    end if;
    return row('accepted', v_settlement.claim_id, v_settlement.outcome, v_settlement.result,
               v_settlement.requested_generation, v_settlement.settled_at)::engine.v2_receipt;
  end if;

  if v_settlement.claim_id is not null then
    return row(case when (v_settlement.outcome, v_settlement.result)
                         = (v2_settle.outcome, v2_settle.result)
                    then 'replayed' else 'conflict' end,
               v_settlement.claim_id, v_settlement.outcome, v_settlement.result,
               v_settlement.requested_generation, v_settlement.settled_at)::engine.v2_receipt;
  end if;
  return row(case when v_claim.state = 'revoked' then 'stale' else 'terminal' end,
             v2_settle.claim_id, null, null, v_work.requested_generation, null)::engine.v2_receipt;
end;
$$;

-- v2_reconcile: move one v2 run forward in one transaction, in separately committed calls.
-- Skips (writes nothing) when health is attention, or backoff before next_attempt_at.
-- Otherwise performs at most max_actions immediate actions (_v2_next_action): once A is
-- completed, dispatch B ('dispatch_b': start B's step state, send B's message to B's stored
-- route with B's start_delay, create B's task with that pair as its snapshot); once B is
-- completed, complete the run with output = B's result ('complete'). Dispatching B wakes the
-- workers waiting on B's queue (engine_queue_<queue>), if any wait. Each action
-- runs in a subtransaction: an error rolls the action back entirely (no half-dispatched B:
-- no task without its message, no message without its task), is recorded in
-- engine_errors, counts consecutive_errors, sets backoff (1 s * 2^(n-1), capped at 60 s) and,
-- after 3 in a row, attention; all of that commits. Only when, under the same locks, no
-- immediate action remains does it set processed_generation to the requested_generation it
-- holds locked; a call that stops with actions left marks nothing processed. A successful call
-- resets the error count and health. A call that finds nothing to do writes nothing.
-- Locks: run (for no key update) -> work (for update) -> step states by step_slug -> tasks ->
--   B's new message.
-- Refuses (nothing written): DR008 max_actions outside 1 .. 64 · DR014 unknown run ·
--   DR015 v1 run · DR005 the live definition differs from the run's.
create or replace function engine.v2_reconcile(run_id uuid, max_actions integer default 8)
returns engine.v2_report
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_limits engine.v2_envelope := engine._v2_envelope();
  v_now timestamptz := engine._now();
  v_run engine.runs;
  v_work engine.run_work;
  v_action text;
  v_actions integer := 0;
  v_b record;
  v_message_id bigint;
  v_failed boolean := false;
  v_sqlstate text;
  v_message text;
  v_context text;
  v_errors integer;
begin
  if v2_reconcile.max_actions is null
     or v2_reconcile.max_actions not between v_limits.reconcile_actions_min
                                     and v_limits.reconcile_actions_max then
    raise exception 'run %: max_actions % is outside % .. %', v2_reconcile.run_id,
      pg_catalog.quote_nullable(v2_reconcile.max_actions::text),
      v_limits.reconcile_actions_min, v_limits.reconcile_actions_max
      using errcode = 'DR008';
  end if;
  -- the run is locked at once; an unknown or v1 run is refused before anything is written
  select r.* into v_run from engine.runs as r where r.run_id = v2_reconcile.run_id for no key update;
  if v_run.run_id is null then
    raise exception 'unknown run %', pg_catalog.quote_nullable(v2_reconcile.run_id::text)
      using errcode = 'DR014';
  end if;
  if v_run.protocol <> 'v2' then
    raise exception 'run % is a % run, not v2', v2_reconcile.run_id, v_run.protocol
      using errcode = 'DR015';
  end if;
  if v_run.definition_hash is distinct from
       (select f.definition_hash from engine.flows as f where f.flow_slug = v_run.flow_slug) then
    raise exception 'run %: the live definition of flow % differs from the one the run started with',
      v2_reconcile.run_id, v_run.flow_slug
      using errcode = 'DR005';
  end if;
  select w.* into strict v_work from engine.run_work as w where w.run_id = v2_reconcile.run_id for update;
  perform engine._hook('reconcile.after_work_lock');
  if v_work.health = 'attention' or (v_work.health = 'backoff' and v_now < v_work.next_attempt_at) then
    return row(v2_reconcile.run_id, v_work.requested_generation, 0,
               v_work.processed_generation = v_work.requested_generation, v_work.health,
               v_run.status)::engine.v2_report;
  end if;
  perform from engine.step_states as ss
   where ss.run_id = v2_reconcile.run_id order by ss.step_slug for update;

  loop
    v_action := engine._v2_next_action(v2_reconcile.run_id);
    exit when v_action is null or v_actions >= v2_reconcile.max_actions;
    begin
      if v_action = 'dispatch_b' then
        select s.step_slug, s.queue_name, coalesce(s.start_delay, 0) as start_delay
          into strict v_b
          from engine.steps as s
         where s.flow_slug = v_run.flow_slug and s.deps_count > 0;
        update engine.step_states as ss
           set status = 'started', started_at = v_now, remaining_deps = 0
         where ss.run_id = v2_reconcile.run_id and ss.step_slug = v_b.step_slug;
        select m.msg_id into strict v_message_id
          from pgmq.send(v_b.queue_name,
                         engine._task_message('v2', v2_reconcile.run_id, v_b.step_slug, 0),
                         v_now + pg_catalog.make_interval(secs => v_b.start_delay)) as m (msg_id);
        insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, queued_at,
                                       queue_name, message_id)
        values (v2_reconcile.run_id, v_b.step_slug, v_run.flow_slug, 0, 'queued', v_now,
                v_b.queue_name, v_message_id);
        perform engine._notify_listeners('engine_queue_' || v_b.queue_name);
      else
        update engine.runs as r
           set status = 'completed', completed_at = v_now, remaining_steps = 0,
               output = (select t.output from engine.step_tasks as t
                          join engine.steps as s on s.flow_slug = t.flow_slug
                                                and s.step_slug = t.step_slug
                         where t.run_id = v2_reconcile.run_id and s.deps_count > 0)
         where r.run_id = v2_reconcile.run_id
        returning r.* into v_run;
      end if;
      perform engine._hook('reconcile.action');
    exception when others then
      get stacked diagnostics v_sqlstate = returned_sqlstate, v_message = message_text,
                              v_context = pg_exception_context;
      v_failed := true;
    end;
    exit when v_failed;
    v_actions := v_actions + 1;
  end loop;

  if v_failed then
    v_errors := v_work.consecutive_errors + 1;
    insert into engine.engine_errors (run_id, generation, action, sqlstate, message, context,
                                      occurred_at)
    values (v2_reconcile.run_id, v_work.requested_generation, v_action, v_sqlstate, v_message,
            v_context, v_now);
    update engine.run_work as w
       set consecutive_errors = v_errors,
           health = case when v_errors >= v_limits.errors_before_attention
                         then 'attention' else 'backoff' end,
           next_attempt_at = v_now + pg_catalog.make_interval(secs => least(
             v_limits.backoff_base_seconds * pg_catalog.power(2, v_errors - 1),
             v_limits.backoff_cap_seconds)),
           attention_reason = case
             when v_errors >= v_limits.errors_before_attention
             then pg_catalog.format('%s consecutive engine errors; last: %s [%s] %s', v_errors,
                                    v_action, v_sqlstate, v_message) end
     where w.run_id = v2_reconcile.run_id
    returning w.* into v_work;
    -- the failed action was rolled back: report the run as it stands, not as the action left it
    return row(v2_reconcile.run_id, v_work.requested_generation, v_actions, false, v_work.health,
               (select r.status from engine.runs as r where r.run_id = v2_reconcile.run_id)
              )::engine.v2_report;
  end if;

  perform engine._hook('reconcile.before_mark_processed');
  if v_action is null
     and (v_work.processed_generation <> v_work.requested_generation or v_work.health <> 'clean') then
    update engine.run_work as w
       set processed_generation = v_work.requested_generation,
           health = 'clean', consecutive_errors = 0, next_attempt_at = null, attention_reason = null
     where w.run_id = v2_reconcile.run_id
    returning w.* into v_work;
  elsif v_actions > 0 and v_work.health <> 'clean' then
    update engine.run_work as w
       set health = 'clean', consecutive_errors = 0, next_attempt_at = null, attention_reason = null
     where w.run_id = v2_reconcile.run_id
    returning w.* into v_work;
  end if;
  return row(v2_reconcile.run_id, v_work.requested_generation, v_actions,
             v_work.processed_generation = v_work.requested_generation, v_work.health,
             v_run.status)::engine.v2_report;
end;
$$;

-- v2_reconcile_next: reconcile the next due v2 run that no other session holds: reconcilers may
-- run side by side and share the work, none waiting on another's run.
-- Due: dirty (requested > processed), not in attention, and backoff over by the engine's clock;
-- oldest next attempt first, then by run id. The run row is taken FOR NO KEY UPDATE SKIP LOCKED
-- (the first lock of the contract's order), then exactly v2_reconcile(run, max_actions): one run
-- per call, one transaction per call, no other run touched. Runs in `skip` are passed over (a
-- driver skips a run whose reconcile it saw refused).
-- Locks: as v2_reconcile (run -> work -> step states -> tasks -> B's new message).
-- Refuses (nothing written): DR008 max_actions outside 1 .. 64; and whatever v2_reconcile refuses.
-- Returns the report of the run reconciled; no row when nothing is due (or every due run is held).
create or replace function engine.v2_reconcile_next(max_actions integer default 8, skip uuid[] default '{}')
returns setof engine.v2_report
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_limits engine.v2_envelope := engine._v2_envelope();
  v_run_id uuid;
begin
  if v2_reconcile_next.max_actions is null
     or v2_reconcile_next.max_actions not between v_limits.reconcile_actions_min
                                          and v_limits.reconcile_actions_max then
    raise exception 'max_actions % is outside % .. %',
      pg_catalog.quote_nullable(v2_reconcile_next.max_actions::text),
      v_limits.reconcile_actions_min, v_limits.reconcile_actions_max
      using errcode = 'DR008';
  end if;
  select r.run_id into v_run_id
    from engine.run_work as w
    join engine.runs as r on r.run_id = w.run_id
   where w.requested_generation > w.processed_generation
     and w.health <> 'attention'
     and (w.health <> 'backoff' or w.next_attempt_at <= engine._now())
     and r.run_id <> all (coalesce(v2_reconcile_next.skip, '{}'))
   order by w.next_attempt_at nulls first, w.run_id
   limit 1
     for no key update of r skip locked;
  if v_run_id is null then
    return;
  end if;
  return next engine.v2_reconcile(v_run_id, v2_reconcile_next.max_actions);
end;
$$;

-- v2_listen: the calling session says it waits, idle, on `channel` ('engine_v2_dirty' for runs
-- that became dirty, 'engine_queue_<queue>' for new messages in one of the engine's queues); the
-- caller LISTENs on its own channel engine_wake_<pid> and reads once more before it waits (the
-- engine wakes one waiter per event and consumes its row). Rows of sessions that are gone are
-- swept here. Idempotent.
-- Locks: the channel's advisory lock (7200, hashtext(channel)) exclusive, so it waits for every
-- notifier of the channel in flight (they hold it shared to commit): the caller's peek, after
-- this commits, sees their work; a notifier that starts later sees this registration.
-- Writes: its own row of engine.listeners. Refuses: DR014 a channel that is not the engine's.
create or replace function engine.v2_listen(channel text)
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

-- v2_unlisten: the calling session no longer waits on `channel` (it is busy again), or on any
-- channel when `channel` is null. Writes: its own rows of engine.listeners.
create or replace function engine.v2_unlisten(channel text default null)
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

-- ----- privileges (as 9900_privileges.sql)
revoke all on all functions in schema engine from public;
revoke all on all tables in schema engine from public;
grant execute on function engine.v2_listen(text), engine.v2_unlisten(text) to engine_worker, engine_operator;
grant execute on function engine.v2_reconcile_next(integer, uuid[]) to engine_operator;
