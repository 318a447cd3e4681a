-- engine.create_flow: validation SQLSTATEs, the 47-character queue name, slug spelling, idempotency.
begin;
select plan(11);

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

select * from finish();
rollback;
