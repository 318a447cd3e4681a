-- Definition functions: validation SQLSTATEs, slug spelling, step order, idempotency.
begin;
select plan(22);

select throws_ok($$select engine.create_flow('bad-slug')$$, 'DR001', null, 'invalid flow slug: DR001');
select throws_ok($$select engine.create_flow('9lives')$$, 'DR001', null, 'slug may not start with a digit');
select throws_ok($$select engine.create_flow(repeat('x', 48))$$, 'DR001', null, '48-character default queue name: DR001');
select lives_ok($$select engine.create_flow(repeat('x', 47))$$, '47 characters are fine');
select throws_ok($$select engine.create_flow('f', max_attempts => 0)$$, 'DR001', null, 'max_attempts 0: DR001');
select throws_ok($$select engine.create_flow('f', base_delay => -1)$$, 'DR001', null, 'negative base_delay: DR001');
select throws_ok($$select engine.create_flow('f', timeout => 0)$$, 'DR001', null, 'timeout 0: DR001');

select lives_ok($$select engine.create_flow('MixedCase', timeout => 30)$$, 'create a flow');
select is((select flow_slug from engine.flows where lower(flow_slug) = 'mixedcase'), 'MixedCase', 'slug spelling kept');
select is((select (engine.create_flow('MixedCase', timeout => 30)).timeout), 30, 'same definition again is a no-op');
select throws_ok($$select engine.create_flow('MixedCase', timeout => 31)$$, 'DR016', null, 'different options: DR016');

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
