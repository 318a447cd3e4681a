select (engine.create_flow('V', 3, 0, 60)).flow_slug;
select (engine.add_step('V', 'A', max_attempts => 1)).step_slug;
select (engine.add_step('V', 'T')).step_slug;
select (engine.add_step('V', 'X')).step_slug;
select engine.start_flow('V', '{"n":1}') is not null;
select engine.start_flow('V', '{"n":2}') is not null;
create view pg_temp.m as select (r.run_id = (select run_id from engine.runs order by run_id desc limit 1)) as hi, t.step_slug, t.message_id from engine.step_tasks t join engine.runs r using (run_id);
select count(*) from engine.start_tasks('v', array(select message_id from pg_temp.m where hi and step_slug = 'A'));
create extension if not exists dblink;
select dblink_connect('c0', format('dbname=%s port=%s host=%s user=%s', current_database(), current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1), current_user) || ' application_name=regress_c0');
select dblink_connect('c1', format('dbname=%s port=%s host=%s user=%s', current_database(), current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1), current_user) || ' application_name=regress_c1');
-- session: 1
begin;
select count(*) from engine.start_tasks('v', array(select t.message_id from engine.step_tasks t where t.run_id = (select run_id from engine.runs order by run_id limit 1) and t.step_slug = 'A'));
-- session: 3
begin;
select count(*) from engine.start_tasks('v', array(select t.message_id from engine.step_tasks t where t.run_id = (select run_id from engine.runs order by run_id desc limit 1) and t.step_slug = 'X'));
-- session: 0
select dblink_send_query('c1', format('select count(*) from engine.start_tasks(%L, %L::bigint[])', 'v', array(select message_id from pg_temp.m where (not hi and step_slug = 'A') or (hi and step_slug = 'T'))));
select regress_settled('c1');
select dblink_is_busy('c1');
select count(*) from engine.start_tasks('v', array(select message_id from pg_temp.m where hi and step_slug = 'T'));
select (engine.complete_task((select run_id from engine.runs order by run_id desc limit 1), 'T', 0, '{}')).status;
select dblink_send_query('c0', format('select (engine.fail_task(%L, %L, 0, %L)).status', (select run_id from engine.runs order by run_id desc limit 1), 'A', 'boom'));
select regress_settled('c0');
select dblink_is_busy('c0');
-- session: 1
commit;
-- session: 0
select regress_settled('c1');
select dblink_is_busy('c1');
-- session: 3
commit;
-- session: 0
select * from dblink_get_result('c0') as t(r text);
select * from dblink_get_result('c1') as t(r text);
select (r.run_id = (select run_id from engine.runs order by run_id desc limit 1)) as hi, t.step_slug, t.status from engine.step_tasks t join engine.runs r using (run_id) order by 1, 2;
