create extension if not exists dblink;
select engine.create_flow('F', 1, 0, 10);
select engine.add_step('F', 'A');
select engine.add_step('F', 'B', array['A']);
create table p as select engine.v2_start_run('F', '{"n":1}') as run_id;
create table m as select t.run_id, t.message_id from engine.step_tasks t join p using (run_id) where t.step_slug = 'A';
select dblink_connect('c1', 'dbname=' || current_database() || ' port=' || current_setting('port') || ' host=' || split_part(current_setting('unix_socket_directories'), ',', 1) || ' user=' || current_user || ' application_name=regress_c1');
-- session 1 claims A in an open transaction (holds the run and work locks)
-- session: 1
begin;
select count(*) from engine.v2_claim((select run_id from m), 'A', 'f', array[(select message_id from m)]);
-- session: 0
-- a second worker's claim of the same task, asynchronously (it waits)
select dblink_send_query('c1', format('set lock_timeout = ''8s''; select count(*) from engine.v2_claim(%L, ''A'', ''f'', array[%s]::bigint[])', (select run_id from m), (select message_id from m)));
select regress_settled('c1');
select l.relation::regclass::text, l.mode, l.granted from pg_locks l join pg_stat_activity a on a.pid = l.pid where a.datname = current_database() and a.query like '%v2_claim%' and a.pid <> pg_backend_pid() and l.locktype = 'tuple' order by 1, 2;
-- session: 1
-- the first worker's transaction goes on with the same run (reconcile needs the run no key update)
select (engine.v2_reconcile((select run_id from m), 8)).actions;
commit;
-- session: 0
select * from dblink_get_result('c1') as t(n bigint);
select * from dblink_get_result('c1') as t(n bigint);
select count(*) from engine.task_claims;
