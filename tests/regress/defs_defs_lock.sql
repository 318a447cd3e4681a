create extension if not exists dblink;
select dblink_connect('c1', 'dbname=' || current_database() || ' port=' || current_setting('port') || ' host=' || split_part(current_setting('unix_socket_directories'), ',', 1) || ' user=' || current_user || ' application_name=regress_c1');
select (engine.create_flow('F', 1, 0, 60)).flow_slug;
select (engine.add_step('F', 'A')).step_slug;
select (engine.add_step('F', 'B', array['A'])).step_slug;
select (engine.create_flow('G')).flow_slug;
select (engine.add_step('G', 'A')).step_slug;
select (engine.create_flow('D')).flow_slug;
select (engine.add_step('D', 'A')).step_slug;
create table p as select engine.v2_start_run('F', '{"n":1}') as run_id;
create table m as select msg_id from pgmq.read('f', 0, 1);
create table c as select g.claim_id from p, m, engine.v2_claim(p.run_id, 'A', 'f', array[m.msg_id]) g;
create table y as select engine.start_flow('F', '{}') as run_id;
select count(*) from engine.start_tasks('f', array(select msg_id from pgmq.read('f', 0, 5)));
-- session: 1
begin;
select (engine.v2_settle((select claim_id from c), 'failed', '{"e":1}')).verdict;
select (engine.v2_reconcile((select run_id from p))).run_status;
select (engine.complete_task((select run_id from y), 'A', 0, '{}')).status;
select count(*) from engine.start_tasks('f', array(select msg_id from pgmq.read('f', 0, 5)));
select (engine.complete_task((select run_id from y), 'B', 0, '{}')).status;
-- session: 0
select (engine.create_flow('F', 1, 0, 60)).flow_slug;
select (engine.add_step('F', 'C')).step_slug;
select engine.delete_flow('F');
select dblink_send_query('c1', 'select (engine.create_flow(''F'', 1, 0, 60)).flow_slug');
select regress_settled('c1');
-- session: 1
commit;
-- session: 0
select * from dblink_get_result('c1') as t(x text);
select * from dblink_get_result('c1') as t(x text);
select flow_slug from engine.flows order by 1;
-- session: 2
begin;
select (engine.create_flow('X1')).flow_slug;
-- session: 0
select (engine.create_flow('X2')).flow_slug;
-- session: 2
rollback;
begin;
select engine.start_flow('G', '{}') is not null;
-- session: 0
select engine.delete_flow('D');
-- session: 2
commit;
-- session: 0
select flow_slug from engine.flows order by 1;
