select (engine.create_flow('F', 1, 0, 60)).flow_slug;
select (engine.add_step('F', 'A')).step_slug;
select (engine.add_step('F', 'B', array['A'])).step_slug;
-- session: 1
begin;
select (engine.create_flow('F', 1, 0, 60)).flow_slug;
-- session: 0
select engine.v2_start_run('F', '{}') is not null;
-- session: 1
rollback;
-- session: 0
select count(*) from engine.runs;
