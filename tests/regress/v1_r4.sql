create extension if not exists dblink;
select dblink_connect('c2', format('host=%s port=%s dbname=%s user=%s', split_part(current_setting('unix_socket_directories'), ',', 1), current_setting('port'), current_database(), current_user) || ' application_name=regress_c2');
select engine.create_flow('T', 5, 0, 1);
select engine.add_step('T', 'X');
create table rt as select engine.start_flow('T', '{}') as id;
-- session: 1
begin;
select count(*) from engine.start_tasks('t', array(select message_id from engine.step_tasks where flow_slug = 'T'));
-- session: 0
select dblink_exec('c2', 'begin');
select dblink_send_query('c2', 'select count(*) from engine.start_tasks(''t'', array(select message_id from engine.step_tasks where flow_slug = ''T''))');
select regress_settled('c2');
-- session: 1
commit;
-- session: 0
select * from dblink_get_result('c2') as t(n bigint);
select * from dblink_get_result('c2') as t(n bigint);
-- a timer expires, nothing is ordered: X's start (c2, uncommitted) passes the stall line of
-- timeout 1 s + 2 s; one-sided, a longer wait under load leaves X just as stalled
select pg_sleep(3.3);
set lock_timeout = '500ms';
select engine.requeue_stalled_tasks();
select t.step_slug, t.status, t.attempts_count from engine.step_tasks t order by 1;
select dblink_exec('c2', 'commit');
select engine.requeue_stalled_tasks();
select t.step_slug, t.status, t.attempts_count from engine.step_tasks t order by 1;
