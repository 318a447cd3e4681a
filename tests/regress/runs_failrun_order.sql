select (engine.create_flow('V', 3, 0, 60)).flow_slug;
select (engine.add_step('V', 'A', max_attempts => 1)).step_slug;
select (engine.add_step('V', 'X')).step_slug;
select (engine.add_step('V', 'Y')).step_slug;
select engine.start_flow('V', '{}') is not null;
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'Y'));
select (engine.fail_task((select run_id from engine.runs), 'Y', 0, 'b')).status;
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'X'));
select (engine.fail_task((select run_id from engine.runs), 'X', 0, 'c')).status;
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'A'));
analyze engine.step_tasks;
select ctid, step_slug, status, error_message from engine.step_tasks order by ctid;
create extension if not exists dblink;
select dblink_connect('c', format('dbname=%s port=%s host=%s user=%s', current_database(), current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1), current_user) || ' application_name=regress_c');
-- session: 1
-- only fail_task's session (c, which waits first) may detect the deadlock: this one neither
-- detects it nor times out first, however late c's deadlock_timeout (1 s) fires under load
set deadlock_timeout = '10s';
set lock_timeout = '10s';
begin;
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'Y'));
-- session: 0
select dblink_send_query('c', format('select (engine.fail_task(%L, %L, 0, %L)).status', (select run_id from engine.runs), 'A', 'boom'));
select regress_settled('c');
-- session: 1
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'X'));
commit;
-- session: 0
select * from dblink_get_result('c') as t(r text);
select step_slug, status from engine.step_tasks order by 1;
select status from engine.runs;
