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
create function engine.v2_claim(run_id uuid, step_slug text, queue_name text, message_ids bigint[])
returns setof engine.v2_grant
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_limits engine.v2_envelope := engine._v2_envelope();
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

  perform engine._hook('claim.before_guarded_update');
  -- one instant for claimed_at, the lease horizon and the message's vt
  v_now := engine._now();
  v_lease := v_now + pg_catalog.make_interval(
    secs => v_timeout + v_limits.lease_grace_seconds);

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
