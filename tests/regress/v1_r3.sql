create extension if not exists dblink;
select dblink_connect('c1', format('host=%s port=%s dbname=%s user=%s', split_part(current_setting('unix_socket_directories'), ',', 1), current_setting('port'), current_database(), current_user) || ' application_name=regress_c1');
select engine.create_flow('M', 5, 0, 1);
select engine.add_step('M', 'X');
select engine.create_flow('N', 5, 0, 1);
select engine.add_step('N', 'A');
select engine.add_step('N', 'B', array['A']);
create table rm as select engine.start_flow('M', '{}') as id;
create table rn as select engine.start_flow('N', '{}') as id;
select count(*) from engine.start_tasks('m', array(select message_id from engine.step_tasks where flow_slug = 'M'));
select count(*) from engine.start_tasks('n', array(select message_id from engine.step_tasks where flow_slug = 'N'));
update engine.step_tasks set started_at = clock_timestamp() - interval '3.3 s' where flow_slug in ('M', 'N');
-- session: 1
begin;
select (engine.complete_task((select id from rn), 'A', 0, '1')).status;
select engine.requeue_stalled_tasks();
select count(*) from engine.start_tasks('m', array(select message_id from engine.step_tasks where flow_slug = 'M'));
-- M.X restarted 2.4 s ago, written in its own transaction (never slept: a sleep plus the round trips
-- under load could pass the 3 s stall line); its age at c1's recheck is 2.4 s plus two round
-- trips: inside (2 s, 3 s), between a recheck one second short and the timeout + 2 s one
update engine.step_tasks set started_at = started_at - interval '2.4 s' where flow_slug = 'M';
-- session: 0
select dblink_send_query('c1', 'select engine.requeue_stalled_tasks()');
select regress_settled('c1');
-- session: 1
commit;
-- session: 0
select * from dblink_get_result('c1') as t(n text);
select t.flow_slug, t.step_slug, t.status, t.attempts_count, t.error_message from engine.step_tasks t order by 1, 2;
select r.flow_slug, r.status from engine.runs r order by 1;
