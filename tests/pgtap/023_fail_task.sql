-- engine.fail_task: a retry delayed by base_delay, the last failure fails the run and
-- terminalizes its unfinished sibling tasks.
begin;
select plan(6);

select engine.create_flow('shop', max_attempts => 2, base_delay => 3);
select engine.add_step('shop', 'b');
select engine.add_step('shop', 'c');
create temp table t_run as select engine.start_flow('shop', '{"n": 1}') as run_id;

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

select * from finish();
rollback;
