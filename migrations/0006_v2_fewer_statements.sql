-- 0006_v2_fewer_statements.sql: the same v2 behaviour with fewer statements per call, after
-- profiling (pg_stat_user_functions): _v2_delivery reads run, route and task snapshot in one
-- query; v2_claim locks the work row together with the live definition hash and the task
-- together with its policy; v2_reconcile locks the run at once. No table changes.


-- ----- 0620_function__v2_delivery.sql
-- _v2_delivery: the argument and identity checks shared by v2_claim and v2_take_over, done
-- before any lock, scan or write. Returns the one message id.
-- Refuses: DR003 message_ids is not exactly one non-null id ({}, {1,2}, {5,5}, {NULL})
--   · DR014 unknown run, or a step the run's flow does not have · DR015 a v1 run
--   · DR004 the pair (queue_name, message id) is not the stored snapshot of the task of
--     (run, step), or not the step's route (a wrong queue, a wrong message, a wrong step, or a
--     step whose task does not exist yet). Snapshots never change, so no lock is needed.
create or replace function engine._v2_delivery(run_id uuid, step_slug text, queue_name text, message_ids bigint[])
returns bigint
language plpgsql stable
set search_path = ''
as $$
declare
  v_protocol text;
  v_flow text;
  v_route text;
  v_task_queue text;
  v_task_message bigint;
begin
  if _v2_delivery.message_ids is null
     or pg_catalog.array_ndims(_v2_delivery.message_ids) is distinct from 1
     or pg_catalog.cardinality(_v2_delivery.message_ids) <> (engine.v2_limits() ->> 'message_ids_per_call')::integer
     or pg_catalog.array_position(_v2_delivery.message_ids, null) is not null then
    raise exception 'run %, step %: message_ids % is not exactly one message id',
      _v2_delivery.run_id, _v2_delivery.step_slug,
      pg_catalog.quote_nullable(_v2_delivery.message_ids::text)
      using errcode = 'DR003';
  end if;

  select r.protocol, r.flow_slug, s.queue_name, t.queue_name, t.message_id
    into v_protocol, v_flow, v_route, v_task_queue, v_task_message
    from engine.runs as r
    left join engine.steps as s on s.flow_slug = r.flow_slug and s.step_slug = _v2_delivery.step_slug
    left join engine.step_tasks as t
      on t.run_id = r.run_id and t.step_slug = _v2_delivery.step_slug and t.task_index = 0
   where r.run_id = _v2_delivery.run_id;
  if v_protocol is null then
    raise exception 'unknown run %', pg_catalog.quote_nullable(_v2_delivery.run_id::text)
      using errcode = 'DR014';
  end if;
  if v_protocol <> 'v2' then
    raise exception 'run % is a % run, not v2', _v2_delivery.run_id, v_protocol
      using errcode = 'DR015';
  end if;
  if v_route is null then
    raise exception 'run %: flow % has no step %', _v2_delivery.run_id, v_flow,
      pg_catalog.quote_nullable(_v2_delivery.step_slug)
      using errcode = 'DR014';
  end if;

  if v_task_queue is distinct from _v2_delivery.queue_name
     or v_task_message is distinct from _v2_delivery.message_ids[pg_catalog.array_lower(_v2_delivery.message_ids, 1)]
     or v_route is distinct from _v2_delivery.queue_name then
    raise exception 'run %, step %: message (%, %) is not this task''s message (%, %)',
      _v2_delivery.run_id, _v2_delivery.step_slug,
      pg_catalog.quote_nullable(_v2_delivery.queue_name),
      _v2_delivery.message_ids[pg_catalog.array_lower(_v2_delivery.message_ids, 1)],
      coalesce(v_task_queue, 'no task yet'), coalesce(v_task_message::text, '-')
      using errcode = 'DR004';
  end if;
  return v_task_message;
end;
$$;


-- ----- 0630_function_v2_claim.sql
-- v2_claim: grant one queued v2 task to exactly one caller, for the one message it read.
-- The worker's pgmq.read before this call is a separate, earlier reservation and never counts
-- as ownership; ownership is the claim returned here.
-- Locks: run (for no key update) -> work (for update) -> the step state -> the task (for
--   update) -> its message (pgmq.set_vt). No definition lock: a flow with a non-terminal v2
--   run cannot change (DR011); a changed live definition is still detected (DR005).
-- Refuses (nothing written): DR003 not exactly one message id · DR014 unknown run or step ·
--   DR015 v1 run · DR004 the pair is not the task's stored snapshot and the step's route ·
--   DR005 the live definition differs from the run's.
-- Not claimable now (an empty set, nothing written): run not started, work dirty or not
--   caught up, health backoff or attention, step state not started, task not queued, the
--   message gone, or another session won the task first.
-- Writes on a grant: step_tasks (started, attempts_count + 1, started_at), task_claims
--   (current, with the policy snapshot), the message's vt = the lease horizon
--   (claim time + effective timeout + 2 s, the same instant).
create or replace function engine.v2_claim(run_id uuid, step_slug text, queue_name text, message_ids bigint[])
returns setof engine.v2_grant
language plpgsql security definer
set search_path = ''
as $$
declare
  v_limits jsonb := engine.v2_limits();
  v_message_id bigint;
  v_now timestamptz;
  v_run engine.runs;
  v_live_hash text;
  v_clean boolean;
  v_status text;
  v_timeout integer;
  v_max_attempts integer;
  v_start_delay integer;
  v_task engine.step_tasks;
  v_lease timestamptz;
  v_claim_id uuid := pg_catalog.gen_random_uuid();
begin
  -- arguments and identity first: nothing is locked or written before these pass
  v_message_id := engine._v2_delivery(v2_claim.run_id, v2_claim.step_slug, v2_claim.queue_name,
                                      v2_claim.message_ids);

  -- lock the run, then the work row, in the contract's order
  select r.* into strict v_run from engine.runs as r where r.run_id = v2_claim.run_id for no key update;
  perform engine._hook('claim.after_run_lock');
  -- the work row (locked) and the live definition hash, in one statement
  select w.requested_generation = w.processed_generation and w.health = 'clean', f.definition_hash
    into strict v_clean, v_live_hash
    from engine.run_work as w, engine.flows as f
   where w.run_id = v2_claim.run_id and f.flow_slug = v_run.flow_slug
     for update of w;
  if v_run.definition_hash is distinct from v_live_hash then
    raise exception 'run %: the live definition of flow % differs from the one the run started with',
      v2_claim.run_id, v_run.flow_slug
      using errcode = 'DR005';
  end if;
  if v_run.status <> 'started' then
    return;
  end if;
  if not v_clean then
    return;
  end if;
  perform from engine.step_states as ss
   where ss.run_id = v2_claim.run_id and ss.step_slug = v2_claim.step_slug and ss.status = 'started'
     for update;
  if not found then
    return;
  end if;
  -- the task (locked) and its effective policy, in one statement
  select t.status, coalesce(s.timeout, f.timeout), coalesce(s.max_attempts, f.max_attempts),
         coalesce(s.start_delay, 0)
    into v_status, v_timeout, v_max_attempts, v_start_delay
    from engine.step_tasks as t
    join engine.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    join engine.flows as f on f.flow_slug = t.flow_slug
   where t.run_id = v2_claim.run_id and t.step_slug = v2_claim.step_slug and t.task_index = 0
     for update of t;
  if v_status is distinct from 'queued' then
    return;
  end if;

  -- one instant for claimed_at, the lease horizon and the message's vt
  v_now := pg_catalog.clock_timestamp();
  v_lease := v_now + pg_catalog.make_interval(
    secs => v_timeout + (v_limits ->> 'lease_grace_seconds')::integer);

  -- the guarded update decides the winner; only its returned row is granted
  update engine.step_tasks as t
     set status = 'started', attempts_count = t.attempts_count + 1, started_at = v_now
   where t.run_id = v2_claim.run_id and t.step_slug = v2_claim.step_slug and t.task_index = 0
     and t.status = 'queued'
  returning t.* into v_task;
  if not found then
    return;
  end if;

  perform from pgmq.set_vt(v_task.queue_name, v_task.message_id, v_lease);
  if not found then
    -- the message is gone: undo the guarded update and refuse (nothing stays written)
    raise exception 'run %, step %: message % is no longer in queue %', v2_claim.run_id,
      v2_claim.step_slug, v_task.message_id, v_task.queue_name
      using errcode = 'DR006';
  end if;

  insert into engine.task_claims (claim_id, run_id, step_slug, task_index, attempt, queue_name,
                                  message_id, claimed_at, lease_expires_at, timeout, max_attempts,
                                  start_delay, state)
  values (v_claim_id, v2_claim.run_id, v2_claim.step_slug, 0,
          v_task.attempts_count,  -- a v2 task is claimed once (max_attempts 1); takeovers number on
          v_task.queue_name, v_task.message_id, v_now, v_lease, v_timeout,
          v_max_attempts, v_start_delay, 'current');

  return next row(v_claim_id, v2_claim.run_id, v2_claim.step_slug, 0, v_task.queue_name,
                  v_task.message_id, engine._task_input(v2_claim.run_id, v2_claim.step_slug),
                  v_lease)::engine.v2_grant;
end;
$$;


-- ----- 0670_function_v2_reconcile.sql
-- v2_reconcile: move one v2 run forward in one transaction, in separately committed calls.
-- Skips (writes nothing) when health is attention, or backoff before next_attempt_at.
-- Otherwise performs at most max_actions immediate actions (_v2_next_action): once A is
-- completed, start B's step state and create B's task ('create_b'), then send B's message to
-- B's stored route with B's start_delay and snapshot the pair ('send_b'); once B is
-- completed, complete the run with output = B's result ('complete'). Each action
-- runs in a subtransaction: an error rolls the action back entirely, is recorded in
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
set search_path = ''
as $$
declare
  v_limits jsonb := engine.v2_limits();
  v_now timestamptz := pg_catalog.clock_timestamp();
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
     or v2_reconcile.max_actions not between (v_limits ->> 'reconcile_actions_min')::integer
                                     and (v_limits ->> 'reconcile_actions_max')::integer then
    raise exception 'run %: max_actions % is outside % .. %', v2_reconcile.run_id,
      pg_catalog.quote_nullable(v2_reconcile.max_actions::text),
      v_limits ->> 'reconcile_actions_min', v_limits ->> 'reconcile_actions_max'
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
      if v_action in ('create_b', 'send_b') then
        select s.step_slug, s.queue_name, coalesce(s.start_delay, 0) as start_delay
          into strict v_b
          from engine.steps as s
         where s.flow_slug = v_run.flow_slug and s.deps_count > 0;
      end if;
      if v_action = 'create_b' then
        update engine.step_states as ss
           set status = 'started', started_at = v_now, remaining_deps = 0
         where ss.run_id = v2_reconcile.run_id and ss.step_slug = v_b.step_slug;
        insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, queued_at)
        values (v2_reconcile.run_id, v_b.step_slug, v_run.flow_slug, 0, 'queued', v_now);
      elsif v_action = 'send_b' then
        perform from engine.step_tasks as t
         where t.run_id = v2_reconcile.run_id and t.step_slug = v_b.step_slug and t.task_index = 0
           for update;
        select m.msg_id into strict v_message_id
          from pgmq.send(v_b.queue_name,
                         engine._task_message('v2', v2_reconcile.run_id, v_b.step_slug, 0),
                         v_now + pg_catalog.make_interval(secs => v_b.start_delay)) as m (msg_id);
        update engine.step_tasks as t
           set queue_name = v_b.queue_name, message_id = v_message_id
         where t.run_id = v2_reconcile.run_id and t.step_slug = v_b.step_slug
           and t.task_index = 0 and t.message_id is null;
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
           health = case when v_errors >= (v_limits ->> 'errors_before_attention')::integer
                         then 'attention' else 'backoff' end,
           next_attempt_at = v_now + pg_catalog.make_interval(secs => least(
             (v_limits ->> 'backoff_base_seconds')::integer * pg_catalog.power(2, v_errors - 1),
             (v_limits ->> 'backoff_cap_seconds')::integer)),
           attention_reason = case
             when v_errors >= (v_limits ->> 'errors_before_attention')::integer
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


-- ----- privileges
revoke all on all functions in schema engine from public;
