select (engine.create_flow('V', 3, 0, 60)).flow_slug;
select (engine.add_step('V', 'A', max_attempts => 1)).step_slug;
select (engine.add_step('V', 'W')).step_slug;
select (engine.add_step('V', 'Z', timeout => 1)).step_slug;
select (engine.add_step('V', 'B', array['W'])).step_slug;
select engine.start_flow('V', '{}') is not null;
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'W'));
select (engine.complete_task((select run_id from engine.runs), 'W', 0, '{}')).status;
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'A'));
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'Z'));
-- a timer expires, nothing is ordered: Z's message vt (timeout 1 s + 2 s) passes, so Z is visible
-- again; one-sided, A's vt is 62 s away
select pg_sleep(3.3);
select step_slug, status, message_id from engine.step_tasks order by message_id;
create extension if not exists dblink;
select dblink_connect('c', format('dbname=%s port=%s host=%s user=%s', current_database(), current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1), current_user) || ' application_name=regress_c');
-- session: 2
begin;
select (select step_slug from engine.step_tasks t where t.message_id = m.msg_id) from pgmq.read('v', 30, 1) as m;
-- session: 1
begin;
select (select step_slug from engine.step_tasks t where t.message_id = m.msg_id) from pgmq.read('v', 30, 1) as m;
-- session: 2
rollback;
-- session: 0
select dblink_send_query('c', format('select (engine.fail_task(%L, %L, 0, %L)).status', (select run_id from engine.runs), 'A', 'boom'));
select regress_settled('c');
-- session: 2
select (select step_slug from engine.step_tasks t where t.message_id = m.msg_id) from pgmq.read('v', 30, 5) as m;
-- session: 1
commit;
-- session: 0
select * from dblink_get_result('c') as t(r text);
select step_slug, status from engine.step_tasks order by 1;
select count(*) from pgmq.q_v;
