select engine.create_flow('F', 1, 0, 10);
select engine.add_step('F', 'A');
select engine.add_step('F', 'B', array['A']);
create table r1 as select engine.v2_start_run('F', '{"n":1}') as run_id;
create table c1 as select * from engine.v2_claim((select run_id from r1), 'A', 'f', array[(select t.message_id from engine.step_tasks t join r1 using (run_id) where t.step_slug = 'A')]);
select verdict, generation from engine.v2_settle((select claim_id from c1), 'completed', '{"a":1}');
create table r2 as select engine.v2_start_run('F', '{"n":2}') as run_id;
create table c2 as select * from engine.v2_claim((select run_id from r2), 'A', 'f', array[(select t.message_id from engine.step_tasks t join r2 using (run_id) where t.step_slug = 'A')]);
select verdict, generation from engine.v2_settle((select claim_id from c2), 'completed', '{"a":2}');
create table r3 as select engine.v2_start_run('F', '{"n":3}') as run_id;
create table c3 as select * from engine.v2_claim((select run_id from r3), 'A', 'f', array[(select t.message_id from engine.step_tasks t join r3 using (run_id) where t.step_slug = 'A')]);
select verdict, generation from engine.v2_settle((select claim_id from c3), 'completed', '{"a":3}');
create table r4 as select engine.v2_start_run('F', '{"n":4}') as run_id;
create table c4 as select * from engine.v2_claim((select run_id from r4), 'A', 'f', array[(select t.message_id from engine.step_tasks t join r4 using (run_id) where t.step_slug = 'A')]);
select verdict, generation from engine.v2_settle((select claim_id from c4), 'completed', '{"a":4}');
create table r5 as select engine.v2_start_run('F', '{"n":5}') as run_id;
create table c5 as select * from engine.v2_claim((select run_id from r5), 'A', 'f', array[(select t.message_id from engine.step_tasks t join r5 using (run_id) where t.step_slug = 'A')]);
select verdict, generation from engine.v2_settle((select claim_id from c5), 'completed', '{"a":5}');
create table r6 as select engine.v2_start_run('F', '{"n":6}') as run_id;
create table c6 as select * from engine.v2_claim((select run_id from r6), 'A', 'f', array[(select t.message_id from engine.step_tasks t join r6 using (run_id) where t.step_slug = 'A')]);
select verdict, generation from engine.v2_settle((select claim_id from c6), 'completed', '{"a":6}');
create table r7 as select engine.v2_start_run('F', '{"n":7}') as run_id;
create table c7 as select * from engine.v2_claim((select run_id from r7), 'A', 'f', array[(select t.message_id from engine.step_tasks t join r7 using (run_id) where t.step_slug = 'A')]);
select verdict, generation from engine.v2_settle((select claim_id from c7), 'completed', '{"a":7}');
create view due as select count(*) from engine.run_work where requested_generation > processed_generation;
select generation, actions, processed from engine.v2_reconcile_next(8, null);
select * from due;
select generation, actions, processed from engine.v2_reconcile_next(8, '{}');
-- session: 1
begin;
select 1 from engine.runs r join engine.run_work w using (run_id) where w.requested_generation > w.processed_generation order by w.next_attempt_at nulls first, w.run_id limit 1 for share of r;
-- session: 2
set lock_timeout = '300ms';
select generation, actions, processed from engine.v2_reconcile_next(8);
-- session: 1
rollback;
-- session: 3
begin;
select generation, actions, processed from engine.v2_reconcile_next(8);
-- session: 4
set lock_timeout = '300ms';
select generation, actions, processed from engine.v2_reconcile_next(8);
select * from due;
-- session: 3
commit;
-- session: 5
set plpgsql.extra_errors = 'too_many_rows';
select * from due;
select generation, actions, processed from engine.v2_reconcile_next(8);
select * from due;
