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
create function engine.v2_reconcile_next(max_actions integer default 8, skip uuid[] default '{}')
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
