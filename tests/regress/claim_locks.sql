select engine.create_flow('F', 1, 0, 10);
select engine.add_step('F', 'A');
select engine.add_step('F', 'B', array['A']);
create table p as select engine.v2_start_run('F', '{"n":1}') as run_id;
create table p2 as select engine.v2_start_run('F', '{"n":2}') as run_id;
create table px as select engine.v2_start_run('F', '{"n":3}') as run_id;
create table py as select engine.v2_start_run('F', '{"n":4}') as run_id;
create table m as select r.tag, t.run_id, t.message_id from engine.step_tasks t join (select 'p' as tag, run_id from p union all select 'p2', run_id from p2 union all select 'px', run_id from px union all select 'py', run_id from py) r using (run_id) where t.step_slug = 'A';
-- part 1: a claim parked (failed hook, transaction left open) right after its run lock
-- session: 1
begin;
set local engine.hooks = 'claim.after_run_lock:fail';
select count(*) from engine.v2_claim((select run_id from m where tag = 'p'), 'A', 'f', array[(select message_id from m where tag = 'p')]);
-- session: 0
select count(*) from engine.v2_claim((select run_id from m where tag = 'p'), 'A', 'f', array[(select message_id from m where tag = 'p')]);
-- session: 1
rollback;
-- session: 0
-- part 2: a dirty run held by a (not eligible) claim in an open transaction; reconcile_next skips it
create table c2 as select claim_id from engine.v2_claim((select run_id from m where tag = 'p2'), 'A', 'f', array[(select message_id from m where tag = 'p2')]);
select (engine.v2_settle((select claim_id from c2), 'completed', '{"a":2}')).verdict;
-- session: 1
begin;
select count(*) from engine.v2_claim((select run_id from m where tag = 'p2'), 'A', 'f', array[(select message_id from m where tag = 'p2')]);
-- session: 0
select count(*) from engine.v2_reconcile_next(8);
-- session: 1
rollback;
-- session: 0
-- part 3: repeatable read callers whose snapshot predates a takeover
create table cx as select claim_id from engine.v2_claim((select run_id from m where tag = 'px'), 'A', 'f', array[(select message_id from m where tag = 'px')]);
create table cy as select claim_id from engine.v2_claim((select run_id from m where tag = 'py'), 'A', 'f', array[(select message_id from m where tag = 'py')]);
set engine.clock_offset = '10 minutes';
create table cx2 as select claim_id from engine.v2_take_over((select run_id from m where tag = 'px'), 'A', (select claim_id from cx), 'f', array[(select message_id from m where tag = 'px')]);
select count(*) from cx2;
-- session: 1
begin isolation level repeatable read;
select count(*) from engine.runs;
-- session: 2
begin isolation level repeatable read;
select count(*) from engine.runs;
-- session: 0
select count(*) from engine.v2_take_over((select run_id from m where tag = 'py'), 'A', (select claim_id from cy), 'f', array[(select message_id from m where tag = 'py')]);
set engine.clock_offset = '30 minutes';
select count(*) from engine.v2_take_over((select run_id from m where tag = 'px'), 'A', (select claim_id from cx2), 'f', array[(select message_id from m where tag = 'px')]);
select w.health from engine.run_work w join m using (run_id) order by m.tag;
-- session: 1
select count(*) from engine.v2_claim((select run_id from m where tag = 'px'), 'A', 'f', array[(select message_id from m where tag = 'px')]);
rollback;
-- session: 2
select count(*) from engine.v2_claim((select run_id from m where tag = 'py'), 'A', 'f', array[(select message_id from m where tag = 'py')]);
rollback;
-- session: 0
select m.tag, t.status, t.attempts_count, t.infrastructure_losses from engine.step_tasks t join m using (run_id) where t.step_slug = 'A' order by m.tag;
select m.tag, count(*) from engine.task_claims c join m using (run_id) group by m.tag order by m.tag;
