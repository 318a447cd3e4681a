-- engine.add_step: validation SQLSTATEs, step order, redefinition, and refusals writing nothing.
begin;
select plan(11);

select engine.create_flow('MixedCase', timeout => 30);

select throws_ok($$select engine.add_step('nope', 'a')$$, 'DR014', null, 'unknown flow: DR014');
select lives_ok($$select engine.add_step('MixedCase', 'a')$$, 'root step');
select throws_ok($$select engine.add_step('MixedCase', 'b', array['zz'])$$, 'DR014', null, 'unknown dependency: DR014');
select throws_ok($$select engine.add_step('MixedCase', 'b', array['b'])$$, 'DR001', null, 'self dependency (cycle): DR001');
select throws_ok($$select engine.add_step('MixedCase', 'b', array['a', 'a'])$$, 'DR001', null, 'duplicate dependency: DR001');
select throws_ok($$select engine.add_step('MixedCase', 'run')$$, 'DR001', null, 'reserved slug run: DR001');
select throws_ok($$select engine.add_step('MixedCase', 'b', start_delay => -1)$$, 'DR001', null, 'negative start_delay: DR001');
select lives_ok($$select engine.add_step('MixedCase', 'b', array['a'])$$, 'dependent step');
select results_eq(
  $$select step_slug, step_index from engine.steps where flow_slug = 'MixedCase' order by step_index$$,
  $$values ('a', 0), ('b', 1)$$, 'step_index is the 0-based add order');
select throws_ok($$select engine.add_step('MixedCase', 'b')$$, 'DR016', null, 'same step, other deps: DR016');
select is((select count(*)::int from engine.steps), 2, 'refusals wrote nothing');

select * from finish();
rollback;
