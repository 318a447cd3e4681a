create extension if not exists dblink;
select dblink_connect('c1', format('host=%s port=%s dbname=%s user=%s', split_part(current_setting('unix_socket_directories'), ',', 1), current_setting('port'), current_database(), current_user) || ' application_name=regress_c1');
select engine.create_flow('P', 3, 0, 5);
select engine.add_step('P', 'A');
select engine.add_step('P', 'B');
create table rp as select engine.start_flow('P', '{}') as id;
select count(*) from engine.start_tasks('p', array(select message_id from engine.step_tasks));
-- session: 1
begin;
select (engine.complete_task((select id from rp), 'B', 0, '1')).status;
-- session: 0
set lock_timeout = '500ms';
select (engine.complete_task((select id from rp), 'A', 0, '2')).status;
-- session: 1
commit;
-- session: 0
select (engine.complete_task((select id from rp), 'A', 0, '2')).status;
select status, output from engine.runs;
-- session: 1
begin;
select engine.prune_data_older_than('0 seconds');
-- session: 0
select dblink_send_query('c1', 'select (engine.complete_task(' || quote_literal((select id from rp)) || '::uuid, ''A'', 0, ''3'')).status');
select regress_settled('c1');
-- session: 1
commit;
-- session: 0
select * from dblink_get_result('c1', false) as t(n text);
select dblink_error_message('c1');
select count(*) from engine.runs;
