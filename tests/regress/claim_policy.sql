select engine.create_flow('F', 3, 2, 10);
select engine.add_step('F', 'A', '{}', 1, 4, null, null);
select engine.add_step('F', 'B', array['A'], 1, 5, null, 7);
create table p as select engine.v2_start_run('F', '{"n":1}') as run_id;
create table p2 as select engine.v2_start_run('F', '{"n":2}') as run_id;
create table p3 as select engine.v2_start_run('F', '{"n":3}') as run_id;
create table g as select * from engine.v2_claim((select run_id from p), 'A', 'f', array[(select message_id from engine.step_tasks t join p using (run_id) where t.step_slug = 'A')]);
select g.run_id = p.run_id as run_ok, g.step_slug, g.task_index, g.queue_name, g.message_id = t.message_id as msg_ok, g.input, g.lease_expires_at = c.lease_expires_at as lease_ok from g, p, engine.step_tasks t, engine.task_claims c where t.run_id = p.run_id and t.step_slug = 'A' and c.claim_id = g.claim_id;
select c.step_slug, c.attempt, c.queue_name, c.timeout, c.max_attempts, c.start_delay, c.state, c.lease_expires_at - c.claimed_at as lease_len from engine.task_claims c order by c.claimed_at;
select t.step_slug, t.status, t.attempts_count, t.infrastructure_losses, t.started_at = c.claimed_at as started_ok from engine.step_tasks t join engine.task_claims c using (run_id, step_slug, task_index) order by t.step_slug;
-- claim again the started task: empty set; with the hook armed past the status check the mutant fails
set engine.hooks = 'claim.before_guarded_update:fail';
select count(*) from engine.v2_claim((select run_id from p), 'A', 'f', array[(select message_id from engine.step_tasks t join p using (run_id) where t.step_slug = 'A')]);
set engine.hooks = '';
select (engine.v2_settle((select claim_id from g), 'completed', '{"a":1}')).verdict;
select (engine.v2_reconcile((select run_id from p), 8)).*;
create table gb as select * from engine.v2_claim((select run_id from p), 'B', 'f', array[(select message_id from engine.step_tasks t join p using (run_id) where t.step_slug = 'B')]);
select gb.step_slug, gb.task_index, gb.queue_name, gb.input from gb;
select c.step_slug, c.attempt, c.timeout, c.max_attempts, c.start_delay, c.state from engine.task_claims c order by c.claimed_at;
select (engine.v2_settle((select claim_id from gb), 'completed', '{"b":2}')).verdict;
select t.step_slug, t.status, t.output, t.error_message from engine.step_tasks t join p using (run_id) order by 1;
select ss.step_slug, ss.status, ss.error_message from engine.step_states ss join p using (run_id) order by 1;
-- run 2: A completes, B fails
create table g2 as select * from engine.v2_claim((select run_id from p2), 'A', 'f', array[(select message_id from engine.step_tasks t join p2 using (run_id) where t.step_slug = 'A')]);
select (engine.v2_settle((select claim_id from g2), 'completed', '{"a":2}')).verdict;
select (engine.v2_reconcile((select run_id from p2), 8)).*;
create table g2b as select * from engine.v2_claim((select run_id from p2), 'B', 'f', array[(select message_id from engine.step_tasks t join p2 using (run_id) where t.step_slug = 'B')]);
select (engine.v2_settle((select claim_id from g2b), 'failed', '{"err":"boom"}')).verdict;
select t.step_slug, t.status, t.output, t.error_message from engine.step_tasks t join p2 using (run_id) order by 1;
select ss.step_slug, ss.status, ss.error_message from engine.step_states ss join p2 using (run_id) order by 1;
select r.status from engine.runs r join p2 using (run_id);
-- run 3: A's message vanishes before the claim
select pgmq.delete('f', (select message_id from engine.step_tasks t join p3 using (run_id) where t.step_slug = 'A'));
select count(*) from engine.v2_claim((select run_id from p3), 'A', 'f', array[(select message_id from engine.step_tasks t join p3 using (run_id) where t.step_slug = 'A')]);
select t.status, t.attempts_count from engine.step_tasks t join p3 using (run_id) where t.step_slug = 'A';
select count(*) from engine.task_claims c join p3 using (run_id);
