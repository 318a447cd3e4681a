-- engine.v2_start_run: the envelope refused before any write; a start writes A's task and the
-- work row, and nothing for B.
begin;
select plan(7);

select engine.create_flow('ab', max_attempts => 1);
select engine.add_step('ab', 'A');
select engine.add_step('ab', 'B', array['A']);
select engine.create_flow('three', max_attempts => 1);
select engine.add_step('three', 'A');
select engine.add_step('three', 'B', array['A']);
select engine.add_step('three', 'C', array['B']);

select throws_ok($$select engine.v2_start_run('three', '{}')$$, 'DR001', null, 'three steps: DR001');
select throws_ok($$select engine.v2_start_run('nope', '{}')$$, 'DR014', null, 'unknown flow: DR014');
select throws_ok($$select engine.v2_start_run('ab', to_jsonb(repeat('x', 65535)))$$, 'DR002', null, 'input over 65 536 bytes: DR002');
select throws_ok($$select engine.v2_start_run('ab', null)$$, 'DR009', null, 'SQL NULL input: DR009');
select is((select count(*)::int from engine.runs), 0, 'refused starts wrote no run');
select engine.v2_start_run('ab', '{"n": 1}');
select is((select count(*)::int from engine.run_work), 1, 'one work row');
select is((select count(*)::int from engine.step_tasks where step_slug = 'B'), 0, 'B has no task');

select * from finish();
rollback;
