select (engine.create_flow('F', 1, 0, 60)).flow_slug;
select (engine.add_step('F', 'A')).step_slug;
select (engine.add_step('F', 'B', array['A'])).step_slug;
set lock_timeout = '300ms';
-- session: 1
begin;
select engine.v2_start_run('F', '{"p":1}') is not null;
-- session: 0
select engine.v2_listen('engine_queue_f');
-- session: 1
commit;
-- session: 0
select count(*) from engine.listeners;
select engine.v2_unlisten();
-- session: 2
select engine.v2_listen('engine_queue_f');
-- session: 3
select engine.v2_listen('engine_queue_f');
-- session: 1
begin;
select engine.v2_start_run('F', '{"p":2}') is not null;
-- session: 0
select engine.v2_start_run('F', '{"p":3}') is not null;
-- session: 1
commit;
-- session: 2
select count(*) from engine.listeners where pid = pg_backend_pid();
-- session: 3
select count(*) from engine.listeners where pid = pg_backend_pid();
select engine.v2_unlisten();
-- session: 2
select engine.v2_unlisten();
select engine.v2_listen('engine_queue_f');
-- session: 3
select engine.v2_listen('engine_queue_f');
-- session: 2
select engine.v2_unlisten();
-- session: 0
vacuum engine.listeners;
-- session: 4
select engine.v2_listen('engine_queue_f');
-- session: 0
analyze engine.listeners;
select ctid, pid = (select min(pid) from engine.listeners) as min_pid from engine.listeners order by ctid;
select engine.v2_start_run('F', '{"p":4}') is not null;
-- session: 3
select count(*) from engine.listeners where pid = pg_backend_pid();
-- session: 4
select count(*) from engine.listeners where pid = pg_backend_pid();
