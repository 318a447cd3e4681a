-- engine.v2_reconcile: max_actions refused out of range; one action dispatches B whole (its
-- step state, task and message) and marks the generation processed; a second call does nothing.
begin;
select plan(4);

select engine.create_flow('ab', max_attempts => 1);
select engine.add_step('ab', 'A');
select engine.add_step('ab', 'B', array['A']);
create temp table t_run as select engine.v2_start_run('ab', '{"n": 1}') as run_id;
create temp table t_grant as
  select * from engine.v2_claim((select run_id from t_run), 'A', 'ab', (select array_agg(msg_id) from pgmq.q_ab));
select engine.v2_settle((select claim_id from t_grant), 'completed', '{"a": 0}');

select throws_ok(format($$select engine.v2_reconcile(%L, 0)$$, (select run_id from t_run)), 'DR008', null, 'max_actions 0: DR008');
select is((engine.v2_reconcile((select run_id from t_run), 1)).processed, true, 'one action dispatches B, then processed');
select is((engine.v2_reconcile((select run_id from t_run))).actions, 0, 'a second call finds nothing to do');
select is((select count(*)::int from pgmq.q_ab where message->>'step_slug' = 'B'), 1, 'B queued once');

select * from finish();
rollback;
