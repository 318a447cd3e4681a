-- engine.complete_task: falsy output kept, the message archived, the cascade starts the next
-- step; refused (DR010) on a v2 run.
begin;
select plan(5);

select engine.create_flow('shop');
select engine.add_step('shop', 'a');
select engine.add_step('shop', 'b', array['a']);
create temp table t_run as select engine.start_flow('shop', '{"n": 1}') as run_id;
select engine.start_tasks('shop', (select array_agg(msg_id) from pgmq.q_shop));

select engine.complete_task((select run_id from t_run), 'a', 0, '0');
select is((select output from engine.step_tasks where step_slug = 'a'), '0'::jsonb, 'falsy output kept');
select is((select count(*)::int from pgmq.a_shop), 1, 'a''s message archived');
select is((select status from engine.step_states where step_slug = 'b'), 'started', 'b started by the cascade');
select is((select count(*)::int from pgmq.q_shop where message->>'step_slug' = 'b'), 1, 'b''s message sent');

select engine.create_flow('ab', max_attempts => 1);
select engine.add_step('ab', 'A');
select engine.add_step('ab', 'B', array['A']);
create temp table t_v2 as select engine.v2_start_run('ab', '{}') as run_id;
select throws_ok(format($$select engine.complete_task(%L, 'A', 0, '1')$$, (select run_id from t_v2)), 'DR010', null,
                 'v1 writer on a v2 run: DR010');

select * from finish();
rollback;
