select engine.create_flow('H1', 1, 0, 10);
select engine.add_step('H1', 'B');
select engine.add_step('H1', 'C', array['B']);
select engine.create_flow('H2', 1, 0, 10);
select engine.add_step('H2', 'X');
select engine.add_step('H2', 'A', array['X']);
select engine.create_flow('F', 1, 0, 10);
select engine.add_step('F', 'A');
select engine.add_step('F', 'B', array['A']);
select engine.create_flow('K', 1, 0, 10);
select engine.add_step('K', 'Z');
select engine.add_step('K', 'D', array['Z']);
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
-- session: 1
select generation, actions, processed, health, run_status from engine.v2_reconcile((select run_id from r1), 8);
-- session: 2
analyze;
select generation, actions, processed, health, run_status from engine.v2_reconcile((select run_id from r2), 8);
-- session: 3
set enable_indexscan = off;
set enable_bitmapscan = off;
select generation, actions, processed, health, run_status from engine.v2_reconcile((select run_id from r3), 8);
-- session: 4
set enable_indexscan = off;
set enable_bitmapscan = off;
set enable_nestloop = off;
select generation, actions, processed, health, run_status from engine.v2_reconcile((select run_id from r4), 8);
-- session: 5
set enable_indexscan = off;
set enable_bitmapscan = off;
set enable_nestloop = off;
set enable_hashjoin = off;
select generation, actions, processed, health, run_status from engine.v2_reconcile((select run_id from r5), 8);
