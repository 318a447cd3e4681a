select engine.create_flow('F', 1, 0, 10);
select engine.add_step('F', 'A');
select engine.add_step('F', 'B', array['A']);
create table p as select engine.v2_start_run('F', '{"n":1}') as run_id;
create table c as select claim_id from engine.v2_claim((select run_id from p), 'A', 'f', array[(select message_id from engine.step_tasks t join p using (run_id) where t.step_slug = 'A')]);
-- a settlement in flight holds the channel's advisory lock shared until it commits
-- session: 1
begin;
select (engine.v2_settle((select claim_id from c), 'completed', '{"a":1}')).verdict;
-- session: 0
select engine.v2_listen('engine_v2_dirty');
-- session: 1
commit;
-- session: 0
select engine.v2_unlisten();
-- dead sessions' rows on another channel; unlisten of one session
-- session: 2
select engine.v2_listen('engine_queue_f');
-- session: 3
select engine.v2_listen('engine_v2_dirty');
-- session: 0
select regress_terminated(l.pid) from engine.listeners l where l.channel = 'engine_queue_f';
select engine.v2_listen('engine_v2_dirty');
select channel, count(*) from engine.listeners group by 1 order by 1;
select engine.v2_unlisten('engine_v2_dirty');
select channel, count(*) from engine.listeners group by 1 order by 1;
select engine.v2_listen('engine_queue_nope');
