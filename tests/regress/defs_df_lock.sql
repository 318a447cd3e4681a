-- part 3 first (fresh pgmq.meta): queue drop order. Q's queues created z then a.
create extension if not exists dblink;
select dblink_connect('c1', 'dbname=' || current_database() || ' port=' || current_setting('port') || ' host=' || split_part(current_setting('unix_socket_directories'), ',', 1) || ' user=' || current_user || ' application_name=regress_c1');
select (engine.create_flow('Q', 3, 0, 60, 'step')).flow_slug;
select (engine.add_step('Q', 'Z')).queue_name;
select (engine.add_step('Q', 'A')).queue_name;
select queue_name from pgmq.list_queues();
-- session: 1
begin;
select count(*) from pgmq.read('q__a', 0, 1);
-- session: 0
select dblink_send_query('c1', 'select engine.delete_flow(''Q'')');
select regress_settled('c1');
-- session: 1
select count(*) from pgmq.read('q__z', 0, 1);
commit;
-- session: 0
select * from dblink_get_result('c1') as t(x text);
select * from dblink_get_result('c1') as t(x text);
select queue_name from pgmq.list_queues() order by 1;
select flow_slug from engine.flows order by 1;
-- part 1: another flow's run held by a session
select (engine.create_flow('G', 3, 0, 60)).flow_slug;
select (engine.add_step('G', 'A')).step_slug;
create table g as select engine.start_flow('G', '{}') as run_id;
select count(*) from engine.start_tasks('g', array(select msg_id from pgmq.read('g', 0, 5)));
select (engine.create_flow('F')).flow_slug;
select (engine.add_step('F', 'A')).step_slug;
select (engine.create_flow('v1')).flow_slug;
select (engine.add_step('v1', 'A')).step_slug;
select (engine.create_flow('started')).flow_slug;
select (engine.add_step('started', 'A')).step_slug;
-- session: 1
begin;
select (engine.complete_task((select run_id from g), 'A', 0, '{}')).status;
-- session: 0
select engine.delete_flow('F');
select engine.delete_flow('v1');
select engine.delete_flow('started');
-- session: 1
commit;
-- session: 0
select flow_slug from engine.flows order by 1;
-- part 2: lock order over the runs of one flow (run_id order vs heap order)
select (engine.create_flow('H', 3, 0, 1)).flow_slug;
select (engine.add_step('H', 'A')).step_slug;
do $$
declare i integer := 0;
begin
  loop
    perform engine.start_flow('H', '{}');
    i := i + 1;
    exit when i >= 2 and (select r.run_id from engine.runs r where r.flow_slug = 'H' order by r.run_id limit 1)
                      <> (select r.run_id from engine.runs r where r.flow_slug = 'H' order by r.ctid limit 1);
  end loop;
end $$;
create table a as select r.run_id from engine.runs r where r.flow_slug = 'H' order by r.run_id limit 1;
select count(*) > 1 from engine.start_tasks('h', array(select msg_id from pgmq.read('h', 0, 100)));
-- session: 1
begin;
select (engine.complete_task((select run_id from a), 'A', 0, '{}')).status;
-- session: 0
select dblink_send_query('c1', 'select engine.delete_flow(''H'')');
select regress_settled('c1');
-- session: 1
set engine.clock_offset = '10 minutes';
select engine.requeue_stalled_tasks() > 0;
commit;
-- session: 0
select * from dblink_get_result('c1') as t(x text);
select * from dblink_get_result('c1') as t(x text);
select count(*) from engine.runs where flow_slug = 'H';
select flow_slug from engine.flows order by 1;
select queue_name from pgmq.list_queues() order by 1;
