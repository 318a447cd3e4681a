-- v2_take_over: controlled lease takeover of a started v2 task whose current claim is
-- expected_claim_id and whose lease horizon has passed.
-- Checked in this order: arguments and identity (DR003, DR004; DR014 unknown run or step,
--   DR015 v1 run); the task exists and is started, expected_claim_id is its current claim and
--   health is not attention (else DR006); the horizon has passed (else DR007); the task has a
--   takeover left (else the attention result).
-- Locks: run (for no key update) -> work (for update) -> the step state -> the task (for
--   update; it covers its claims) -> its message (pgmq.set_vt).
-- Writes on a takeover: the old claim -> revoked (revoked_at, replaced_by; its row otherwise
--   untouched), step_tasks.infrastructure_losses + 1, a new current claim with a new horizon,
--   vt of the task's stored pair = the new horizon. Handler-failure accounting (attempts_count)
--   is never changed.
-- With no takeover left: no grant, run_work.health = 'attention' with a reason (this commits:
--   it is a returned empty set, not an exception), the message stays in its queue.
create function engine.v2_take_over(
  run_id uuid, step_slug text, expected_claim_id uuid, queue_name text, message_ids bigint[]
) returns setof engine.v2_grant
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_limits engine.v2_envelope := engine._v2_envelope();
  v_now timestamptz;
  v_run engine.runs;
  v_work engine.run_work;
  v_task engine.step_tasks;
  v_old engine.task_claims;
  v_lease timestamptz;
  v_claim_id uuid := pg_catalog.gen_random_uuid();
begin
  perform engine._v2_delivery(v2_take_over.run_id, v2_take_over.step_slug, v2_take_over.queue_name,
                              v2_take_over.message_ids);

  select r.* into strict v_run from engine.runs as r where r.run_id = v2_take_over.run_id for no key update;
  perform engine._hook('take_over.after_run_lock');
  select w.* into strict v_work from engine.run_work as w where w.run_id = v2_take_over.run_id for update;
  perform from engine.step_states as ss
   where ss.run_id = v2_take_over.run_id and ss.step_slug = v2_take_over.step_slug
     for update;
  select t.* into v_task
    from engine.step_tasks as t
   where t.run_id = v2_take_over.run_id and t.step_slug = v2_take_over.step_slug and t.task_index = 0
     for update;
  select c.* into v_old
    from engine.task_claims as c
   where c.run_id = v2_take_over.run_id and c.step_slug = v2_take_over.step_slug
     and c.task_index = 0 and c.state = 'current';

  if v_run.status <> 'started' or v_task.status is distinct from 'started'
     or v_old.claim_id is distinct from v2_take_over.expected_claim_id
     or v_work.health = 'attention' then
    raise exception 'run %, step %: claim % cannot be taken over (run %, task %, current claim %, health %)',
      v2_take_over.run_id, v2_take_over.step_slug,
      pg_catalog.quote_nullable(v2_take_over.expected_claim_id::text), v_run.status,
      coalesce(v_task.status, 'absent'), coalesce(v_old.claim_id::text, 'none'), v_work.health
      using errcode = 'DR006';
  end if;

  v_now := engine._now();
  if v_now < v_old.lease_expires_at then
    raise exception 'run %, step %: claim % holds its lease until %; takeover refused',
      v2_take_over.run_id, v2_take_over.step_slug, v_old.claim_id, v_old.lease_expires_at
      using errcode = 'DR007';
  end if;

  if v_task.infrastructure_losses >= v_limits.takeovers_per_task then
    update engine.run_work as w
       set health = 'attention',
           attention_reason = pg_catalog.format(
             'step %s lost its claim %s (lease expired %s) after using its %s controlled takeover(s)',
             v2_take_over.step_slug, v_old.claim_id, v_old.lease_expires_at,
             v_limits.takeovers_per_task)
     where w.run_id = v2_take_over.run_id;
    return;
  end if;

  v_lease := v_now + pg_catalog.make_interval(
    secs => v_old.timeout + v_limits.lease_grace_seconds);
  -- replaced_by is checked at commit (deferred), so the old claim is revoked first and the
  -- new one is inserted after it: there is never a moment with two current claims
  update engine.task_claims as c
     set state = 'revoked', revoked_at = v_now, replaced_by = v_claim_id
   where c.claim_id = v_old.claim_id;
  update engine.step_tasks as t
     set infrastructure_losses = t.infrastructure_losses + 1
   where t.run_id = v2_take_over.run_id and t.step_slug = v2_take_over.step_slug and t.task_index = 0;
  insert into engine.task_claims (claim_id, run_id, step_slug, task_index, attempt, queue_name,
                                  message_id, claimed_at, lease_expires_at, timeout, max_attempts,
                                  start_delay, state)
  values (v_claim_id, v2_take_over.run_id, v2_take_over.step_slug, 0, v_old.attempt + 1,
          v_old.queue_name, v_old.message_id, v_now, v_lease, v_old.timeout, v_old.max_attempts,
          v_old.start_delay, 'current');
  perform from pgmq.set_vt(v_task.queue_name, v_task.message_id, v_lease);
  if not found then
    raise exception 'run %, step %: message % is no longer in queue %', v2_take_over.run_id,
      v2_take_over.step_slug, v_task.message_id, v_task.queue_name
      using errcode = 'DR006';
  end if;

  return next row(v_claim_id, v2_take_over.run_id, v2_take_over.step_slug, 0, v_task.queue_name,
                  v_task.message_id, engine._task_input(v2_take_over.run_id, v2_take_over.step_slug),
                  v_lease)::engine.v2_grant;
end;
$$;
