select (engine.create_flow('V', 1, 0, 60)).flow_slug;
select (engine.add_step('V', 'A')).step_slug;
select (engine.create_flow('E', 1, 0, 60)).flow_slug;
select (engine.create_flow('S', 1, 0, 60, 'step')).flow_slug;
select (engine.add_step('S', 'A')).step_slug;
select flow_slug, queue_mode, definition_hash is not null from engine.flows order by 1;
select engine.start_flow('V', '{"n":1}') is not null;
select engine.start_flow('V', '{"n":2}') is not null;
select engine.start_flow('S', '{"n":3}') is not null;
select engine.start_flow('V', '{"n":4}') is not null;
-- the runs started two minutes ago (backdated, not slept: the candidate's runs must also have
-- ended within the retention when it prunes, so a sleep made a two-sided window under load)
update engine.runs set started_at = started_at - interval '2 minutes';
select count(*) from engine.start_tasks('v', array(select message_id from engine.step_tasks t join engine.runs r using (run_id) where r.input->>'n' in ('1', '2')));
select count(*) from engine.start_tasks('s__a', array(select message_id from engine.step_tasks t join engine.runs r using (run_id) where r.input->>'n' = '3'));
select (engine.fail_task((select run_id from engine.runs where input->>'n' = '1'), 'A', 0, 'x')).status;
select (engine.complete_task((select run_id from engine.runs where input->>'n' = '2'), 'A', 0, '{}')).status;
select (engine.complete_task((select run_id from engine.runs where input->>'n' = '3'), 'A', 0, '{}')).status;
select engine.prune_data_older_than(interval '1 minute');
select input->>'n', status from engine.runs order by 1;
select engine.prune_data_older_than(interval '0');
select input->>'n', status from engine.runs order by 1;
select (select count(*) from pgmq.a_v), (select count(*) from pgmq.a_s__a), (select count(*) from pgmq.q_v);
