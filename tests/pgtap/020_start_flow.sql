-- engine.start_flow: only the roots are queued; a dependent step has no task yet.
begin;
select plan(3);

select engine.create_flow('shop');
select engine.add_step('shop', 'a');
select engine.add_step('shop', 'b', array['a']);
select engine.add_step('shop', 'c');

select lives_ok($$select engine.start_flow('shop', '{"n": 1}')$$, 'start a run');
select is((select count(*)::int from pgmq.q_shop), 2, 'roots a and c are queued');
select is((select count(*)::int from engine.step_tasks where step_slug = 'b'), 0, 'b has no task yet');

select * from finish();
rollback;
