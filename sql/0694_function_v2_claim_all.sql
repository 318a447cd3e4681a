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
