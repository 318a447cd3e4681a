-- The v1 cascade in one session: start, claim, complete, retry, fail, terminalize.
begin;
select plan(16);

select engine.create_flow('shop', max_attempts => 2, base_delay => 3);
select engine.add_step('shop', 'a');
select engine.add_step('shop', 'b', array['a']);
select engine.add_step('shop', 'c');

create temp table t_run as select engine.start_flow('shop', '{"n": 1}') as run_id;

select is((select count(*)::int from pgmq.q_shop), 2, 'roots a and c are queued');
select is((select count(*)::int from engine.step_tasks where step_slug = 'b'), 0, 'b has no task yet');

create temp table t_grant as
  select * from engine.start_tasks('shop', (select array_agg(msg_id) from pgmq.q_shop
                                             where message->>'step_slug' = 'a'));
select is((select count(*)::int from t_grant), 1, 'one grant for a');
select is((select input from t_grant), '{"n": 1}'::jsonb, 'a root step gets the run input');
select is((select count(*)::int from engine.start_tasks('shop', (select array_agg(message_id) from t_grant))), 0,
          'a started task is not granted twice');

select engine.complete_task((select run_id from t_run), 'a', 0, '0');
select is((select output from engine.step_tasks where step_slug = 'a'), '0'::jsonb, 'falsy output kept');
select is((select count(*)::int from pgmq.a_shop), 1, 'a''s message archived');
select is((select status from engine.step_states where step_slug = 'b'), 'started', 'b started by the cascade');
select is((select count(*)::int from pgmq.q_shop where message->>'step_slug' = 'b'), 1, 'b''s message sent');

create temp table t_c as
  select * from engine.start_tasks('shop', (select array_agg(msg_id) from pgmq.q_shop
                                             where message->>'step_slug' = 'c'));
select is((engine.fail_task((select run_id from t_run), 'c', 0, 'boom')).status, 'queued', 'first failure retries');
select ok((select vt >= clock_timestamp() + interval '2 seconds' from pgmq.q_shop
            where msg_id = (select message_id from t_c)), 'retry delayed by base_delay');
select pgmq.set_vt('shop', (select message_id from t_c), 0);
select is((select count(*)::int from engine.start_tasks('shop', (select array_agg(message_id) from t_c))), 1, 'claimed again');
select is((engine.fail_task((select run_id from t_run), 'c', 0, 'boom')).status, 'failed', 'last failure fails');
select is((select status from engine.runs), 'failed', 'run failed');
select is((select status from engine.step_tasks where step_slug = 'b'), 'cancelled', 'sibling task terminalized');
select is((select count(*)::int from pgmq.q_shop), 0, 'no message left in the queue');

select * from finish();
rollback;
