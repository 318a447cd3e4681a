-- _task_claims_are_history: trigger function. A claim row keeps everything it was created
-- with; only state moves, once, from current to settled or revoked (with revoked_at and
-- replaced_by for a revocation).
create function engine._task_claims_are_history()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if (new.claim_id, new.run_id, new.step_slug, new.task_index, new.attempt, new.queue_name,
      new.message_id, new.claimed_at, new.lease_expires_at, new.timeout, new.max_attempts,
      new.start_delay)
     is distinct from
     (old.claim_id, old.run_id, old.step_slug, old.task_index, old.attempt, old.queue_name,
      old.message_id, old.claimed_at, old.lease_expires_at, old.timeout, old.max_attempts,
      old.start_delay) then
    raise exception 'claim % is history: only its state may change', old.claim_id
      using errcode = '23514';
  end if;
  if old.state <> 'current' and new is distinct from old then
    raise exception 'claim % is % and can no longer change', old.claim_id, old.state
      using errcode = '23514';
  end if;
  return new;
end;
$$;
