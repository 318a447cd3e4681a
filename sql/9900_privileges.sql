-- Privileges: nothing in schema engine is usable by PUBLIC. engine_worker executes only what a
-- worker needs; engine_operator executes everything else that is public API. Internal helpers
-- (names starting with _) are executed only through the security definer functions.
revoke all on all functions in schema engine from public;
revoke all on all tables in schema engine from public;
grant usage on schema pgmq to engine_worker;
grant execute on function
  engine.start_tasks(text, bigint[]),
  engine.complete_task(uuid, text, integer, jsonb),
  engine.fail_task(uuid, text, integer, text),
  engine.v2_claim(uuid, text, text, bigint[]),
  engine.v2_settle(uuid, text, jsonb),
  engine.v2_claim_all(uuid[], text[], text[], bigint[]),
  engine.v2_settle_all(uuid[], text[], jsonb[]),
  engine.v2_listen(text),
  engine.v2_unlisten(text)
  to engine_worker;
grant execute on function
  engine.create_flow(text, integer, integer, integer, text),
  engine.add_step(text, text, text[], integer, integer, integer, integer),
  engine.delete_flow(text),
  engine.start_flow(text, jsonb),
  engine.requeue_stalled_tasks(),
  engine.prune_data_older_than(interval),
  engine.v2_limits(),
  engine.v2_start_run(text, jsonb),
  engine.v2_take_over(uuid, text, uuid, text, bigint[]),
  engine.v2_reconcile(uuid, integer),
  engine.v2_reconcile_next(integer, uuid[]),
  engine.v2_reconcile_all(uuid[], integer),
  engine.v2_listen(text),
  engine.v2_unlisten(text)
  to engine_operator;
