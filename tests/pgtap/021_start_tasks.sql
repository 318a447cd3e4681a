-- engine.start_tasks: one grant per queued task, the run input for a root, never granted twice.
begin;
select plan(3);

select engine.create_flow('shop');
select engine.add_step('shop', 'a');
select engine.start_flow('shop', '{"n": 1}');

create temp table t_grant as select * from engine.start_tasks('shop', (select array_agg(msg_id) from pgmq.q_shop));
select is((select count(*)::int from t_grant), 1, 'one grant for a');
select is((select input from t_grant), '{"n": 1}'::jsonb, 'a root step gets the run input');
select is((select count(*)::int from engine.start_tasks('shop', (select array_agg(message_id) from t_grant))), 0,
          'a started task is not granted twice');

select * from finish();
rollback;
