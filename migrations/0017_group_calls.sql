-- 0017_group_calls.sql: fencing that costs little (issue 33). A worker commits every claim of one read in
-- one transaction and every settlement whose handler finished in one transaction, and its reconciler
-- reconciles the runs it just settled in one transaction: engine.v2_claim_all, engine.v2_settle_all and
-- engine.v2_reconcile_all run the existing call once per item, each in a subtransaction of its own (a
-- refusal or an error of one never undoes another), in ascending run_id. Nothing existing changes.

-- v2_claim_all: several claims in one transaction (one commit for a worker's whole read), each
-- exactly one v2_claim call in a subtransaction of its own: a refusal or an error of one never
-- undoes another, and what one call would grant or refuse alone it grants or refuses here.
-- The calls run in ascending run_id (then in the order given): every writer that holds several
-- runs at once takes them in that order, so two groups never wait on each other in a cycle.
-- Returns one row per item, in the order the calls ran: `item` is its 1-based position in the
-- arrays; a grant fills the grant's columns; a call that granted nothing leaves them null; a call
-- that raised fills sqlstate and message (its subtransaction rolled back: it wrote nothing).
-- Locks: per item, as v2_claim (run -> work -> step state -> task -> message), runs held to
--   commit in ascending run_id.
-- Refuses (nothing written): DR008 the arrays are null, of different lengths, or hold more
--   than 64 items.
create function engine.v2_claim_all(run_ids uuid[], step_slugs text[], queue_names text[], message_ids bigint[])
returns table (item integer, claim_id uuid, run_id uuid, step_slug text, task_index integer, queue_name text,
               message_id bigint, input jsonb, lease_expires_at timestamptz, sqlstate text, message text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_call record;
  v_grant engine.v2_grant;
  v_state text;
  v_text text;
begin
  if v2_claim_all.run_ids is null or v2_claim_all.step_slugs is null or v2_claim_all.queue_names is null
     or v2_claim_all.message_ids is null
     or pg_catalog.cardinality(v2_claim_all.run_ids) <> pg_catalog.cardinality(v2_claim_all.step_slugs)
     or pg_catalog.cardinality(v2_claim_all.run_ids) <> pg_catalog.cardinality(v2_claim_all.queue_names)
     or pg_catalog.cardinality(v2_claim_all.run_ids) <> pg_catalog.cardinality(v2_claim_all.message_ids)
     or pg_catalog.cardinality(v2_claim_all.run_ids) > 64 then
    raise exception 'claims: % run ids, % steps, % queues and % message ids: one of each per claim, at most 64',
      pg_catalog.cardinality(v2_claim_all.run_ids), pg_catalog.cardinality(v2_claim_all.step_slugs),
      pg_catalog.cardinality(v2_claim_all.queue_names), pg_catalog.cardinality(v2_claim_all.message_ids)
      using errcode = 'DR008';
  end if;
  for v_call in
    select c.i, c.run_id, c.step_slug, c.queue_name, c.message_id
      from rows from (pg_catalog.unnest(v2_claim_all.run_ids), pg_catalog.unnest(v2_claim_all.step_slugs),
                      pg_catalog.unnest(v2_claim_all.queue_names), pg_catalog.unnest(v2_claim_all.message_ids))
           with ordinality as c (run_id, step_slug, queue_name, message_id, i)
     order by c.run_id, c.i
  loop
    v_grant := null;
    v_state := null;
    v_text := null;
    begin
      select g.* into v_grant
        from engine.v2_claim(v_call.run_id, v_call.step_slug, v_call.queue_name, array[v_call.message_id]) as g;
    exception when others then
      get stacked diagnostics v_state = returned_sqlstate, v_text = message_text;
    end;
    return query select v_call.i::integer, (v_grant).claim_id, (v_grant).run_id, (v_grant).step_slug,
                        (v_grant).task_index, (v_grant).queue_name, (v_grant).message_id, (v_grant).input,
                        (v_grant).lease_expires_at, v_state, v_text;
  end loop;
end;
$$;

-- v2_settle_all: several settlements in one transaction (a worker settles every claim whose
-- handler finished in one commit), each exactly one v2_settle call in a subtransaction of its
-- own: a refusal or an error of one never undoes another, and each verdict is the one the call
-- alone would give. Each accepted settlement is atomic with its archive and its request for
-- orchestration, as alone; no reconcile happens here (B is created only by a later, separately
-- committed reconcile). The calls run in ascending run_id of their claims (then in the order
-- given; an unknown claim last), the order every multi-run writer keeps, so groups never wait
-- on each other in a cycle.
-- Returns one row per item, in the order the calls ran: `item` is its 1-based position in the
-- arrays, then the receipt's columns; a call that raised fills sqlstate and message instead (its
-- subtransaction rolled back: it wrote nothing).
-- Locks: per item, as v2_settle (run -> work -> step states -> task -> message), runs held to
--   commit in ascending run_id.
-- Refuses (nothing written): DR008 the arrays are null, of different lengths, or hold more
--   than 64 items.
create function engine.v2_settle_all(claim_ids uuid[], outcomes text[], results jsonb[])
returns table (item integer, verdict text, claim_id uuid, outcome text, result jsonb, generation bigint,
               settled_at timestamptz, sqlstate text, message text)
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_call record;
  v_receipt engine.v2_receipt;
  v_state text;
  v_text text;
begin
  if v2_settle_all.claim_ids is null or v2_settle_all.outcomes is null or v2_settle_all.results is null
     or pg_catalog.cardinality(v2_settle_all.claim_ids) <> pg_catalog.cardinality(v2_settle_all.outcomes)
     or pg_catalog.cardinality(v2_settle_all.claim_ids) <> pg_catalog.cardinality(v2_settle_all.results)
     or pg_catalog.cardinality(v2_settle_all.claim_ids) > 64 then
    raise exception 'settlements: % claims, % outcomes and % results: one of each per settlement, at most 64',
      pg_catalog.cardinality(v2_settle_all.claim_ids), pg_catalog.cardinality(v2_settle_all.outcomes),
      pg_catalog.cardinality(v2_settle_all.results)
      using errcode = 'DR008';
  end if;
  for v_call in
    select s.i, s.claim_id, s.outcome, s.result
      from rows from (pg_catalog.unnest(v2_settle_all.claim_ids), pg_catalog.unnest(v2_settle_all.outcomes),
                      pg_catalog.unnest(v2_settle_all.results))
           with ordinality as s (claim_id, outcome, result, i)
      left join engine.task_claims as c on c.claim_id = s.claim_id
     order by c.run_id nulls last, s.i
  loop
    v_receipt := null;
    v_state := null;
    v_text := null;
    begin
      v_receipt := engine.v2_settle(v_call.claim_id, v_call.outcome, v_call.result);
    exception when others then
      get stacked diagnostics v_state = returned_sqlstate, v_text = message_text;
    end;
    return query select v_call.i::integer, (v_receipt).verdict, coalesce((v_receipt).claim_id, v_call.claim_id),
                        (v_receipt).outcome, (v_receipt).result, (v_receipt).generation,
                        (v_receipt).settled_at, v_state, v_text;
  end loop;
end;
$$;

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

revoke all on all functions in schema engine from public;
revoke all on all tables in schema engine from public;
grant execute on function engine.v2_claim_all(uuid[], text[], text[], bigint[]),
  engine.v2_settle_all(uuid[], text[], jsonb[]) to engine_worker;
grant execute on function engine.v2_reconcile_all(uuid[], integer) to engine_operator;
