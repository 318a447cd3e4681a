-- engine.v2_settle: refusals and the accepted, replayed and conflict verdicts; a completed
-- settlement leaves the run dirty and creates no B.
begin;
select plan(7);

select engine.create_flow('ab', max_attempts => 1);
select engine.add_step('ab', 'A');
select engine.add_step('ab', 'B', array['A']);
create temp table t_run as select engine.v2_start_run('ab', '{"n": 1}') as run_id;
create temp table t_grant as
  select * from engine.v2_claim((select run_id from t_run), 'A', 'ab', (select array_agg(msg_id) from pgmq.q_ab));

select throws_ok(format($$select engine.v2_settle(%L, 'done', '1')$$, (select claim_id from t_grant)), 'DR009', null, 'unknown outcome: DR009');
select throws_ok($$select engine.v2_settle(gen_random_uuid(), 'completed', '1')$$, 'DR013', null, 'unknown claim: DR013');
select is((engine.v2_settle((select claim_id from t_grant), 'completed', '{"a": 0}')).verdict, 'accepted', 'accepted');
select is((engine.v2_settle((select claim_id from t_grant), 'completed', '{"a": 0}')).verdict, 'replayed', 'replayed');
select is((engine.v2_settle((select claim_id from t_grant), 'completed', '{"a": 1}')).verdict, 'conflict', 'conflict');
select is((select count(*)::int from engine.step_tasks where step_slug = 'B'), 0, 'a completed settlement creates no B');
select is((select requested_generation - processed_generation from engine.run_work), 1::bigint, 'the run is dirty');

select * from finish();
rollback;
