create extension if not exists dblink;
select engine.create_flow('F', 1, 0, 10);
select engine.add_step('F', 'A');
select engine.add_step('F', 'B', array['A']);
-- v1 flow with two runs: start_tasks names one message
select engine.create_flow('V', 1, 0, 10);
select engine.add_step('V', 'X');
create table v1 as select engine.start_flow('V', '{"n":1}') as run_id;
create table v2 as select engine.start_flow('V', '{"n":2}') as run_id;
select t.step_slug, (t.run_id = v1.run_id) as first_run from engine.start_tasks('v', array[(select message_id from engine.step_tasks t join v1 using (run_id))]) t, v1;
select t.status, count(*) from engine.step_tasks t where t.flow_slug = 'V' group by 1 order by 1;
-- takeover grant
create table p as select engine.v2_start_run('F', '{"n":1}') as run_id;
create table m as select t.run_id, t.message_id from engine.step_tasks t join p using (run_id) where t.step_slug = 'A';
create table c as select claim_id from engine.v2_claim((select run_id from m), 'A', 'f', array[(select message_id from m)]);
set engine.clock_offset = '10 minutes';
create table g as select * from engine.v2_take_over((select run_id from m), 'A', (select claim_id from c), 'f', array[(select message_id from m)]);
select g.run_id = m.run_id as run_ok, g.step_slug, g.task_index, g.queue_name, g.message_id = m.message_id as msg_ok, g.input from g, m;
set engine.clock_offset = '';
-- DR011 names the new step
select engine.add_step('F', 'Cnew');
-- add_step waits for a v2_start_run in flight (flow row held for share), then sees its run
select dblink_connect('c1', 'dbname=' || current_database() || ' port=' || current_setting('port') || ' host=' || split_part(current_setting('unix_socket_directories'), ',', 1) || ' user=' || current_user || ' application_name=regress_c1');
select engine.create_flow('G', 1, 0, 10);
select engine.add_step('G', 'A');
select engine.add_step('G', 'B', array['A']);
-- session: 1
begin;
select count(*) from (select engine.v2_start_run('G', '{"n":1}')) s;
-- session: 0
select dblink_send_query('c1', 'set statement_timeout = ''20s''; select (engine.add_step(''G'', ''C'')).step_slug');
select regress_settled('c1');
-- session: 1
commit;
-- session: 0
select * from dblink_get_result('c1') as t(x text);
select * from dblink_get_result('c1') as t(x text);
select step_slug from engine.steps where flow_slug = 'G' order by 1;
