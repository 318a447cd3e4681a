-- v2_reconcile_all: reconcile several runs in one transaction (a worker's reconciler hands over
-- the runs its workers just settled: one commit for all of them), each exactly one v2_reconcile
-- call in a subtransaction of its own: reconciling one run never touches another, an engine
-- error of one is recorded for that run alone (its action rolled back, the error row and the
-- backoff kept, as alone), and a refusal of one never undoes another. The calls run in
-- ascending run_id, the order every multi-run writer keeps. Each call stays a later, separately
-- committed call than the settlement that made its run dirty.
-- Returns one row per item, in the order the calls ran: `item` is its 1-based position, then
-- the report's columns; a call that raised fills sqlstate and message instead (nothing written).
-- Locks: per item, as v2_reconcile (run -> work -> step states -> tasks -> B's new message),
--   runs held to commit in ascending run_id.
-- Refuses (nothing written): DR008 run_ids null or more than 64 items, or max_actions outside
--   1 .. 64.
create function engine.v2_reconcile_all(run_ids uuid[], max_actions integer default 8)
returns table (item integer, run_id uuid, generation bigint, actions integer, processed boolean, health text,
               run_status text, sqlstate text, message text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_limits engine.v2_envelope := engine._v2_envelope();
  v_call record;
  v_report engine.v2_report;
  v_state text;
  v_text text;
begin
  if v2_reconcile_all.run_ids is null or pg_catalog.cardinality(v2_reconcile_all.run_ids) > 64
     or v2_reconcile_all.max_actions is null
     or v2_reconcile_all.max_actions not between v_limits.reconcile_actions_min
                                         and v_limits.reconcile_actions_max then
    raise exception 'reconcile: % run ids (at most 64), max_actions % (% .. %)',
      pg_catalog.cardinality(v2_reconcile_all.run_ids),
      pg_catalog.quote_nullable(v2_reconcile_all.max_actions::text), v_limits.reconcile_actions_min,
      v_limits.reconcile_actions_max
      using errcode = 'DR008';
  end if;
  for v_call in
    select r.i, r.run_id
      from pg_catalog.unnest(v2_reconcile_all.run_ids) with ordinality as r (run_id, i)
     order by r.run_id, r.i
  loop
    v_report := null;
    v_state := null;
    v_text := null;
    begin
      v_report := engine.v2_reconcile(v_call.run_id, v2_reconcile_all.max_actions);
    exception when others then
      get stacked diagnostics v_state = returned_sqlstate, v_text = message_text;
    end;
    return query select v_call.i::integer, coalesce((v_report).run_id, v_call.run_id), (v_report).generation,
                        (v_report).actions, (v_report).processed, (v_report).health, (v_report).run_status,
                        v_state, v_text;
  end loop;
end;
$$;
