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
create function engine.v2_settle(claim_id uuid, outcome text, result jsonb)
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
