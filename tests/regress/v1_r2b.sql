select engine.create_flow('K', 3, 0, 1);
select engine.add_step('K', 'X');
select engine.add_step('K', 'Y');
select engine.add_step('K', 'Q');
select engine.add_step('K', 'Z', array['Y']);
select engine.create_flow('L', 3, 0, 1);
select engine.add_step('L', 'X');
create table rk as select engine.start_flow('K', '{}') as id;
create table rl as select engine.start_flow('L', '{}') as id;
select count(*) from engine.start_tasks('k', array(select message_id from engine.step_tasks where flow_slug = 'K'));
select count(*) from engine.start_tasks('l', array(select message_id from engine.step_tasks where flow_slug = 'L'));
select (engine.complete_task((select id from rk), 'Q', 0, '1')).status;
update engine.step_tasks set started_at = clock_timestamp() - interval '10 s' where flow_slug = 'K' and step_slug = 'Q';
update engine.step_tasks set started_at = clock_timestamp() - interval '3.3 s' where flow_slug = 'L';
update engine.step_tasks set started_at = clock_timestamp() - interval '2.4 s' where flow_slug = 'K' and step_slug = 'X';
-- session: 1
begin;
select (engine.complete_task((select id from rk), 'Y', 0, '2')).status;
-- session: 0
set lock_timeout = '500ms';
select engine.requeue_stalled_tasks();
select t.flow_slug, t.step_slug, t.status from engine.step_tasks t order by 1, 2;
-- session: 1
commit;
-- session: 0
select count(*) from engine.start_tasks('k', array(select message_id from engine.step_tasks where flow_slug = 'K' and step_slug = 'Z'));
update engine.step_tasks set started_at = clock_timestamp() - interval '3.3 s' where flow_slug = 'K' and step_slug = 'X';
-- session: 1
begin;
select (engine.complete_task((select id from rk), 'Z', 0, '3')).status;
-- session: 0
select engine.requeue_stalled_tasks();
select t.flow_slug, t.step_slug, t.status from engine.step_tasks t order by 1, 2;
-- session: 1
rollback;
-- session: 0
select engine.requeue_stalled_tasks();
select t.flow_slug, t.step_slug, t.status from engine.step_tasks t order by 1, 2;
