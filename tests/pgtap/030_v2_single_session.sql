-- Dirty Runs v2, single-session rules: admission, singletons, identity, verdicts, reconcile.
begin;
select plan(30);

select engine.create_flow('ab', max_attempts => 1);
select engine.add_step('ab', 'A');
select engine.add_step('ab', 'B', array['A']);
select engine.create_flow('three', max_attempts => 1);
select engine.add_step('three', 'A');
select engine.add_step('three', 'B', array['A']);
select engine.add_step('three', 'C', array['B']);

-- admission
select throws_ok($$select engine.v2_start_run('three', '{}')$$, 'DR001', null, 'three steps: DR001');
select throws_ok($$select engine.v2_start_run('nope', '{}')$$, 'DR014', null, 'unknown flow: DR014');
select throws_ok($$select engine.v2_start_run('ab', to_jsonb(repeat('x', 65535)))$$, 'DR002', null, 'input over 65 536 bytes: DR002');
select throws_ok($$select engine.v2_start_run('ab', null)$$, 'DR009', null, 'SQL NULL input: DR009');
select is((select count(*)::int from engine.runs), 0, 'refused starts wrote no run');

create temp table t_run as select engine.v2_start_run('ab', '{"n": 1}') as run_id;
create temp table t_msg as select msg_id from pgmq.q_ab;
select is((select count(*)::int from engine.run_work), 1, 'one work row');
select is((select count(*)::int from engine.step_tasks where step_slug = 'B'), 0, 'B has no task');

-- singletons and identity
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{}')$$, (select run_id from t_run)), 'DR003', null, '{} is not one id');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{1,2}')$$, (select run_id from t_run)), 'DR003', null, '{1,2} is not one id');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{5,5}')$$, (select run_id from t_run)), 'DR003', null, '{5,5} is two ids');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{NULL}')$$, (select run_id from t_run)), 'DR003', null, '{NULL} is not an id');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{999}')$$, (select run_id from t_run)), 'DR004', null, 'wrong message: DR004');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'other', array[%s])$$, (select run_id from t_run), (select msg_id from t_msg)), 'DR004', null, 'wrong queue: DR004');
select throws_ok(format($$select * from engine.v2_claim(%L, 'B', 'ab', array[%s])$$, (select run_id from t_run), (select msg_id from t_msg)), 'DR004', null, 'wrong step: DR004');

-- claim
create temp table t_grant as
  select * from engine.v2_claim((select run_id from t_run), 'A', 'ab', array[(select msg_id from t_msg)]);
select is((select count(*)::int from t_grant), 1, 'one grant');
select is((select vt from pgmq.q_ab), (select lease_expires_at from t_grant), 'vt equals the lease horizon');
select is((select count(*)::int from engine.v2_claim((select run_id from t_run), 'A', 'ab', array[(select msg_id from t_msg)])), 0,
          'a second claim gets an empty set');
select throws_ok(format($$select * from engine.v2_take_over(%L, 'A', %L, 'ab', array[%s])$$,
                        (select run_id from t_run), (select claim_id from t_grant), (select msg_id from t_msg)),
                 'DR007', null, 'takeover before the horizon: DR007');

-- settle verdicts
select throws_ok(format($$select engine.v2_settle(%L, 'done', '1')$$, (select claim_id from t_grant)), 'DR009', null, 'unknown outcome: DR009');
select throws_ok($$select engine.v2_settle(gen_random_uuid(), 'completed', '1')$$, 'DR013', null, 'unknown claim: DR013');
select is((engine.v2_settle((select claim_id from t_grant), 'completed', '{"a": 0}')).verdict, 'accepted', 'accepted');
select is((engine.v2_settle((select claim_id from t_grant), 'completed', '{"a": 0}')).verdict, 'replayed', 'replayed');
select is((engine.v2_settle((select claim_id from t_grant), 'completed', '{"a": 1}')).verdict, 'conflict', 'conflict');
select is((select count(*)::int from engine.step_tasks where step_slug = 'B'), 0, 'a completed settlement creates no B');
select is((select requested_generation - processed_generation from engine.run_work), 1::bigint, 'the run is dirty');

-- reconcile
select throws_ok(format($$select engine.v2_reconcile(%L, 0)$$, (select run_id from t_run)), 'DR008', null, 'max_actions 0: DR008');
select is((engine.v2_reconcile((select run_id from t_run), 1)).processed, false, 'one action of two: not processed');
select is((engine.v2_reconcile((select run_id from t_run))).processed, true, 'then processed');
select is((select count(*)::int from pgmq.q_ab where message->>'step_slug' = 'B'), 1, 'B queued once');
select throws_ok(format($$select engine.complete_task(%L, 'B', 0, '1')$$, (select run_id from t_run)), 'DR010', null, 'v1 writer on v2: DR010');

select * from finish();
rollback;
