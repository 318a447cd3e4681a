-- engine.v2_take_over: refused before the lease horizon.
begin;
select plan(1);

select engine.create_flow('ab', max_attempts => 1);
select engine.add_step('ab', 'A');
select engine.add_step('ab', 'B', array['A']);
create temp table t_run as select engine.v2_start_run('ab', '{"n": 1}') as run_id;
create temp table t_msg as select msg_id from pgmq.q_ab;
create temp table t_grant as
  select * from engine.v2_claim((select run_id from t_run), 'A', 'ab', array[(select msg_id from t_msg)]);

select throws_ok(format($$select * from engine.v2_take_over(%L, 'A', %L, 'ab', array[%s])$$,
                        (select run_id from t_run), (select claim_id from t_grant), (select msg_id from t_msg)),
                 'DR007', null, 'takeover before the horizon: DR007');

select * from finish();
rollback;
