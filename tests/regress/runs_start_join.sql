select (engine.create_flow('E1', 3, 0, 1000)).flow_slug;
select (engine.create_flow('E2', 3, 0, 1000)).flow_slug;
select (engine.create_flow('G', 1, 0, 60)).flow_slug;
select (engine.add_step('G', 'A')).step_slug;
select (engine.add_step('G', 'B', array['A'])).step_slug;
select (engine.create_flow('E3', 3, 0, 1000)).flow_slug;
select ctid, flow_slug from engine.flows order by ctid;
select engine.v2_start_run('G', '{}') is not null;
select flow_slug, status from engine.runs order by 1;
