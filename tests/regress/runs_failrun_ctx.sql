select (engine.create_flow('V', 3, 0, 60)).flow_slug;
select (engine.add_step('V', 'A', max_attempts => 1)).step_slug;
select (engine.add_step('V', 'C')).step_slug;
select engine.start_flow('V', '{}') is not null;
select step_slug, status, message_id is not null from engine.step_tasks order by 1;
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'A'));
create function pg_temp.ft() returns text language plpgsql as $f$
declare c text;
begin
  perform set_config('lock_timeout', '1s', true);
  perform engine.fail_task((select run_id from engine.runs), 'A', 0, 'boom');
  return 'ok';
exception when lock_not_available then
  get stacked diagnostics c = pg_exception_context;
  return case when c like '%pgmq%' then 'blocked on a message' else 'blocked on a task: ' || split_part(c, E'\n', 1) end;
end $f$;
-- session: 1
begin;
select step_slug from engine.start_tasks('v', array(select message_id from engine.step_tasks where step_slug = 'C'));
-- session: 0
select pg_temp.ft();
-- session: 1
commit;
-- session: 0
select pg_temp.ft();
select step_slug, status from engine.step_tasks order by 1;
select status from engine.runs;
select count(*) from pgmq.q_v;
