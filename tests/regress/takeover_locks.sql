select engine.create_flow('F', 1, 0, 10) is not null;
select engine.add_step('F', 'A') is not null;
select engine.add_step('F', 'B', array['A']) is not null;
create table rr(label text, run_id uuid);
insert into rr select 'r1', engine.v2_start_run('F', '{"n":1}');
insert into rr select 'r2', engine.v2_start_run('F', '{"n":2}');
insert into rr select 'r3', engine.v2_start_run('F', '{"n":3}');
create function rid(l text) returns uuid language sql as $$ select run_id from rr where label = l $$;
create function tq(l text, s text) returns text language sql as $$ select queue_name from engine.step_tasks where run_id = rid(l) and step_slug = s $$;
create function tm(l text, s text) returns bigint language sql as $$ select message_id from engine.step_tasks where run_id = rid(l) and step_slug = s $$;
create function cur(l text, s text) returns uuid language sql as $$ select claim_id from engine.task_claims where run_id = rid(l) and step_slug = s and state = 'current' $$;
create function cl(l text, s text) returns setof engine.v2_grant language sql as $$ select * from engine.v2_claim(rid(l), s, tq(l, s), array[tm(l, s)]) $$;
create function tk(l text, s text, e uuid) returns setof engine.v2_grant language sql as $$ select * from engine.v2_take_over(rid(l), s, e, tq(l, s), array[tm(l, s)]) $$;
-- tk2: a take over that reports the relation it waited on when it times out on a lock
create function tkw(l text, s text, e uuid) returns text language plpgsql as $$
declare c text; n int;
begin
  select count(*) into n from tk(l, s, e);
  return 'rows ' || n;
exception
  when lock_not_available then
    get stacked diagnostics c = pg_exception_context;
    return 'lock wait on ' || coalesce(substring(c from 'relation "([^"]+)"'), '?');
  when others then
    return 'error ' || sqlstate;
end $$;
create function clw(l text, s text) returns text language plpgsql as $$
declare c text; n int;
begin
  select count(*) into n from cl(l, s);
  return 'rows ' || n;
exception
  when lock_not_available then
    get stacked diagnostics c = pg_exception_context;
    return 'lock wait on ' || coalesce(substring(c from 'relation "([^"]+)"'), '?');
  when others then
    return 'error ' || sqlstate;
end $$;
select count(*) from cl('r1', 'A');
set engine.clock_offset = '1 minute';
set lock_timeout = '300ms';
-- test A: a claim of r3 held open; take over of r1 naming r3's run id as the expected claim
-- session: 1
begin;
select count(*) from cl('r3', 'A');
-- session: 0
select tkw('r1', 'A', rid('r3'));
-- session: 1
rollback;
-- test B: a take over of r1 held open; a claim of another run r2, then a second take over of r1
-- session: 1
set engine.clock_offset = '1 minute';
begin;
select count(*) from tk('r1', 'A', cur('r1', 'A'));
-- session: 0
select clw('r2', 'A');
select tkw('r1', 'A', gen_random_uuid());
-- session: 1
rollback;
-- session: 0
select state, attempt from engine.task_claims order by run_id = rid('r1') desc, attempt;
