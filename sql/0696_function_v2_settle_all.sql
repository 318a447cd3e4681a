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
