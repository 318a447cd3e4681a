-- engine.v2_claim: singleton and identity refusals; one grant with vt at the lease horizon; a
-- second claim gets an empty set.
begin;
select plan(10);

select engine.create_flow('ab', max_attempts => 1);
select engine.add_step('ab', 'A');
select engine.add_step('ab', 'B', array['A']);
create temp table t_run as select engine.v2_start_run('ab', '{"n": 1}') as run_id;
create temp table t_msg as select msg_id from pgmq.q_ab;

select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{}')$$, (select run_id from t_run)), 'DR003', null, '{} is not one id');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{1,2}')$$, (select run_id from t_run)), 'DR003', null, '{1,2} is not one id');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{5,5}')$$, (select run_id from t_run)), 'DR003', null, '{5,5} is two ids');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{NULL}')$$, (select run_id from t_run)), 'DR003', null, '{NULL} is not an id');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'ab', '{999}')$$, (select run_id from t_run)), 'DR004', null, 'wrong message: DR004');
select throws_ok(format($$select * from engine.v2_claim(%L, 'A', 'other', array[%s])$$, (select run_id from t_run), (select msg_id from t_msg)), 'DR004', null, 'wrong queue: DR004');
select throws_ok(format($$select * from engine.v2_claim(%L, 'B', 'ab', array[%s])$$, (select run_id from t_run), (select msg_id from t_msg)), 'DR004', null, 'wrong step: DR004');

create temp table t_grant as
  select * from engine.v2_claim((select run_id from t_run), 'A', 'ab', array[(select msg_id from t_msg)]);
select is((select count(*)::int from t_grant), 1, 'one grant');
select is((select vt from pgmq.q_ab), (select lease_expires_at from t_grant), 'vt equals the lease horizon');
select is((select count(*)::int from engine.v2_claim((select run_id from t_run), 'A', 'ab', array[(select msg_id from t_msg)])), 0,
          'a second claim gets an empty set');

select * from finish();
rollback;
