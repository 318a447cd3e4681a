-- 0007_safe_search_path.sql: every engine function searches pg_catalog first and the caller's
-- temporary schema last (security fix, issue 12).
--
-- With `set search_path = ''` PostgreSQL still searches the session's temporary schema FIRST for
-- relations and types (never for functions and operators). An unqualified built-in type name in a
-- function body (`jsonb`, `text`, `uuid`, ...) or in the PGMQ functions the engine calls therefore
-- resolved to a caller's temporary domain of that name, whose CHECK ran with the function owner's
-- rights: a login granted only engine_worker or engine_operator could make itself superuser, and
-- create_flow could build a PGMQ queue table on the caller's temporary type. Naming pg_temp last
-- makes it the last place searched for relations and types; functions and operators are never
-- looked up there. PGMQ's functions set no path of their own, so they run under this one.
-- No body changes; the function definitions in sql/ carry the same setting.

alter function engine._assert_definition_unlocked(text, text) set search_path = pg_catalog, pg_temp;
alter function engine._definition_hash(text) set search_path = pg_catalog, pg_temp;
alter function engine._ensure_queue(text) set search_path = pg_catalog, pg_temp;
alter function engine._fail_run(uuid, timestamp with time zone) set search_path = pg_catalog, pg_temp;
alter function engine._hook(text) set search_path = pg_catalog, pg_temp;
alter function engine._hook_key(text) set search_path = pg_catalog, pg_temp;
alter function engine._is_valid_slug(text) set search_path = pg_catalog, pg_temp;
alter function engine._refresh_definition_hash() set search_path = pg_catalog, pg_temp;
alter function engine._reserve_queue_name(text, text) set search_path = pg_catalog, pg_temp;
alter function engine._run_work_generations_are_monotonic() set search_path = pg_catalog, pg_temp;
alter function engine._start_ready_steps(uuid, timestamp with time zone) set search_path = pg_catalog, pg_temp;
alter function engine._step_queue_name(text, text, integer) set search_path = pg_catalog, pg_temp;
alter function engine._task_claims_are_history() set search_path = pg_catalog, pg_temp;
alter function engine._task_input(uuid, text) set search_path = pg_catalog, pg_temp;
alter function engine._task_message(text, uuid, text, integer) set search_path = pg_catalog, pg_temp;
alter function engine._v2_delivery(uuid, text, text, bigint[]) set search_path = pg_catalog, pg_temp;
alter function engine._v2_next_action(uuid) set search_path = pg_catalog, pg_temp;
alter function engine.add_step(text, text, text[], integer, integer, integer, integer) set search_path = pg_catalog, pg_temp;
alter function engine.complete_task(uuid, text, integer, jsonb) set search_path = pg_catalog, pg_temp;
alter function engine.create_flow(text, integer, integer, integer, text) set search_path = pg_catalog, pg_temp;
alter function engine.delete_flow(text) set search_path = pg_catalog, pg_temp;
alter function engine.fail_task(uuid, text, integer, text) set search_path = pg_catalog, pg_temp;
alter function engine.prune_data_older_than(interval) set search_path = pg_catalog, pg_temp;
alter function engine.requeue_stalled_tasks() set search_path = pg_catalog, pg_temp;
alter function engine.start_flow(text, jsonb) set search_path = pg_catalog, pg_temp;
alter function engine.start_tasks(text, bigint[]) set search_path = pg_catalog, pg_temp;
alter function engine.v2_claim(uuid, text, text, bigint[]) set search_path = pg_catalog, pg_temp;
alter function engine.v2_limits() set search_path = pg_catalog, pg_temp;
alter function engine.v2_reconcile(uuid, integer) set search_path = pg_catalog, pg_temp;
alter function engine.v2_settle(uuid, text, jsonb) set search_path = pg_catalog, pg_temp;
alter function engine.v2_start_run(text, jsonb) set search_path = pg_catalog, pg_temp;
alter function engine.v2_take_over(uuid, text, uuid, text, bigint[]) set search_path = pg_catalog, pg_temp;

-- The migration refuses to leave any engine function without the safe path.
do $$
declare
  v_unsafe text;
begin
  select pg_catalog.string_agg(p.oid::pg_catalog.regprocedure::pg_catalog.text, ', ')
    into v_unsafe
    from pg_catalog.pg_proc as p
   where p.pronamespace = 'engine'::pg_catalog.regnamespace
     and (p.proconfig is null or not ('search_path=pg_catalog, pg_temp' = any (p.proconfig)));
  if v_unsafe is not null then
    raise exception 'engine functions without search_path = pg_catalog, pg_temp: %', v_unsafe;
  end if;
end;
$$;
