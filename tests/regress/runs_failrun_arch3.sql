select (engine.create_flow('S', 3, 0, 60, 'step')).flow_slug;
select (engine.add_step('S', 'A', max_attempts => 1)).step_slug;
select (engine.add_step('S', 'P')).step_slug;
select (engine.add_step('S', 'R')).step_slug;
select (engine.add_step('S', 'Q', array['R'])).step_slug;
select engine.start_flow('S', '{"n":1}') is not null;
select engine.start_flow('S', '{"n":2}') is not null;
select step_slug from engine.start_tasks('s__r', array(select t.message_id from engine.step_tasks t join engine.runs r using (run_id) where r.input->>'n' = '2' and t.step_slug = 'R'));
select (engine.complete_task((select run_id from engine.runs where input->>'n' = '2'), 'R', 0, '{}')).status;
select step_slug from engine.start_tasks('s__a', array(select t.message_id from engine.step_tasks t join engine.runs r using (run_id) where r.input->>'n' = '2' and t.step_slug = 'A'));
select r.input->>'n', t.step_slug, t.status, t.queue_name, t.message_id from engine.step_tasks t join engine.runs r using (run_id) order by 1, 2;
create extension if not exists dblink;
select dblink_connect('c', format('dbname=%s port=%s host=%s user=%s', current_database(), current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1), current_user) || ' application_name=regress_c');
-- session: 1
begin;
select msg_id from pgmq.read('s__q', 30, 1);
-- session: 0
select dblink_send_query('c', format('select (engine.fail_task(%L, %L, 0, %L)).status', (select run_id from engine.runs where input->>'n' = '2'), 'A', 'boom'));
select regress_settled('c');
-- session: 2
select msg_id from pgmq.read('s__p', 30, 5);
-- session: 1
commit;
-- session: 0
select * from dblink_get_result('c') as t(r text);
select r.input->>'n', t.step_slug, t.status from engine.step_tasks t join engine.runs r using (run_id) order by 1, 2;
