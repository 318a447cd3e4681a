select engine.create_flow('F', 3, 0, 5);
select engine.add_step('F', 'A', '{}', 1);
select engine.add_step('F', 'B');
select engine.add_step('F', 'C');
select engine.create_flow('V', 1, 0, 1);
select engine.add_step('V', 'A');
select engine.add_step('V', 'B', array['A']);
create table r as select engine.start_flow('F', '{}') as id;
select ss.step_slug, ss.status, ss.error_message from engine.step_states ss order by 1;
create table pv as select engine.v2_start_run('V', '{}') as id;
select step_slug from engine.start_tasks('v', array(select msg_id from pgmq.q_v));
select t.flow_slug, t.step_slug, t.status from engine.step_tasks t order by 1, 2;
select count(*) from engine.start_tasks('f', array(select message_id from engine.step_tasks where flow_slug = 'F' and step_slug in ('A', 'B')));
-- session: 1
begin;
select (engine.complete_task((select id from r), 'C', 0, '1')).status;
-- session: 0
set lock_timeout = '500ms';
select count(*) from engine.start_tasks('f', array(select message_id from engine.step_tasks where flow_slug = 'F' and step_slug = 'C'));
-- session: 1
commit;
begin;
select count(*) from engine.start_tasks('f', array(select message_id from engine.step_tasks where flow_slug = 'F' and step_slug = 'C'));
-- session: 0
select (engine.complete_task((select id from r), 'C', 0, '1')).status;
-- session: 1
commit;
-- session: 0
update engine.step_tasks set queued_at = clock_timestamp() - interval '10 s', started_at = clock_timestamp() - interval '5 s' where flow_slug = 'F' and step_slug = 'B';
select (engine.fail_task((select id from r), 'B', 0, 'boom')).status;
select step_slug, status, error_message, queued_at > clock_timestamp() - interval '2 s' as q_recent, started_at > clock_timestamp() - interval '2 s' as s_recent from engine.step_tasks where flow_slug = 'F' order by 1;
-- session: 1
begin;
select count(*) from engine.start_tasks('f', array(select message_id from engine.step_tasks where flow_slug = 'F' and step_slug = 'A'));
-- session: 0
select (engine.fail_task((select id from r), 'A', 0, 'fatal')).status;
-- session: 1
commit;
-- session: 0
select (engine.fail_task((select id from r), 'A', 0, 'fatal')).status;
select ss.step_slug, ss.status, ss.error_message from engine.step_states ss join engine.runs r using (run_id) where r.flow_slug = 'F' order by 1;
select step_slug, status, error_message from engine.step_tasks where flow_slug = 'F' order by 1;
