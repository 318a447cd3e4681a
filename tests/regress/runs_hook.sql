select (engine.create_flow('F', 1, 0, 60)).flow_slug;
select (engine.add_step('F', 'A')).step_slug;
select (engine.add_step('F', 'B', array['A'])).step_slug;
select p, hashtext(p) & 1 as odd, engine._hook_key(p) = (hashtext(p) & 2147483647) as key_ok from unnest(array['start.after_definition_lock', 'claim.after_run_lock', 'settle.after_run_lock', 'take_over.after_run_lock']) as p;
-- session: 1
select pg_advisory_lock(7001, hashtext('start.after_definition_lock') & 2147483647);
-- session: 0
set lock_timeout = '300ms';
set engine.hooks = 'x,start.after_definition_lock';
select engine.v2_start_run('F', '{}') is not null;
select count(*) from engine.runs;
-- session: 1
select pg_advisory_unlock(7001, hashtext('start.after_definition_lock') & 2147483647);
-- session: 0
select engine.v2_start_run('F', '{"k":2}') is not null;
-- session: 1
select pg_try_advisory_lock(7001, hashtext('start.after_definition_lock') & 2147483647);
