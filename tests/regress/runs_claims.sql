select (engine.create_flow('F', 1, 0, 60)).flow_slug;
select (engine.add_step('F', 'A')).step_slug;
select (engine.add_step('F', 'B', array['A'], start_delay => 1)).step_slug;
create temp table r as select engine.v2_start_run('F', '{}') as run_id;
select count(*) from pgmq.read('f', 30, 1);
create temp table ca as select (engine.v2_claim((select run_id from r), 'A', 'f', array(select message_id from engine.step_tasks where step_slug = 'A'))).claim_id;
select (engine.v2_settle((select claim_id from ca), 'completed', '{"a":1}')).verdict;
select count(*) from engine.v2_reconcile((select run_id from r), 8);
select step_slug, status from engine.step_tasks order by 1;
-- a timer expires, nothing is ordered: B's start_delay of 1 s passes, so its message is visible;
-- one-sided, a longer wait under load changes nothing (every lease here is 60 s)
select pg_sleep(1.2);
select count(*) from pgmq.read('f', 30, 1);
create temp table cb as select (engine.v2_claim((select run_id from r), 'B', 'f', array(select message_id from engine.step_tasks where step_slug = 'B'))).claim_id;
select step_slug, start_delay, state from engine.task_claims order by 1;
select (engine.v2_settle((select claim_id from cb), 'completed', '{"b":1}')).verdict;
select step_slug, state from engine.task_claims order by 1;
update engine.task_claims set revoked_at = now() where step_slug = 'A';
update engine.task_claims set state = 'settled' where step_slug = 'A';
