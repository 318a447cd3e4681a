-- v2_reconcile: move one v2 run forward in one transaction, in separately committed calls.
-- Skips (writes nothing) when health is attention, or backoff before next_attempt_at.
-- Otherwise performs at most max_actions immediate actions (_v2_next_action): once A is
-- completed, dispatch B ('dispatch_b': start B's step state, send B's message to B's stored
-- route with B's start_delay, create B's task with that pair as its snapshot); once B is
-- completed, complete the run with output = B's result ('complete'). Dispatching B wakes the
-- workers waiting on B's queue (engine_queue_<queue>), if any wait. Each action
-- runs in a subtransaction: an error rolls the action back entirely (no half-dispatched B:
-- no task without its message, no message without its task), is recorded in
-- engine_errors, counts consecutive_errors, sets backoff (1 s * 2^(n-1), capped at 60 s) and,
-- after 3 in a row, attention; all of that commits. Only when, under the same locks, no
-- immediate action remains does it set processed_generation to the requested_generation it
-- holds locked; a call that stops with actions left marks nothing processed. A successful call
-- resets the error count and health. A call that finds nothing to do writes nothing.
-- Locks: run (for no key update) -> work (for update) -> step states by step_slug -> tasks ->
--   B's new message.
-- Refuses (nothing written): DR008 max_actions outside 1 .. 64 · DR014 unknown run ·
--   DR015 v1 run · DR005 the live definition differs from the run's.
create function engine.v2_reconcile(run_id uuid, max_actions integer default 8)
returns engine.v2_report
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_limits engine.v2_envelope := engine._v2_envelope();
  v_now timestamptz := engine._now();
  v_run engine.runs;
  v_work engine.run_work;
  v_action text;
  v_actions integer := 0;
  v_b record;
  v_message_id bigint;
  v_failed boolean := false;
  v_sqlstate text;
  v_message text;
  v_context text;
  v_errors integer;
begin
  if v2_reconcile.max_actions is null
     or v2_reconcile.max_actions not between v_limits.reconcile_actions_min
                                     and v_limits.reconcile_actions_max then
    raise exception 'run %: max_actions % is outside % .. %', v2_reconcile.run_id,
      pg_catalog.quote_nullable(v2_reconcile.max_actions::text),
      v_limits.reconcile_actions_min, v_limits.reconcile_actions_max
      using errcode = 'DR008';
  end if;
  -- the run is locked at once; an unknown or v1 run is refused before anything is written
  select r.* into v_run from engine.runs as r where r.run_id = v2_reconcile.run_id for no key update;
  if v_run.run_id is null then
    raise exception 'unknown run %', pg_catalog.quote_nullable(v2_reconcile.run_id::text)
      using errcode = 'DR014';
  end if;
  if v_run.protocol <> 'v2' then
    raise exception 'run % is a % run, not v2', v2_reconcile.run_id, v_run.protocol
      using errcode = 'DR015';
  end if;
  if v_run.definition_hash is distinct from
       (select f.definition_hash from engine.flows as f where f.flow_slug = v_run.flow_slug) then
    raise exception 'run %: the live definition of flow % differs from the one the run started with',
      v2_reconcile.run_id, v_run.flow_slug
      using errcode = 'DR005';
  end if;
  select w.* into strict v_work from engine.run_work as w where w.run_id = v2_reconcile.run_id for update;
  perform engine._hook('reconcile.after_work_lock');
  if v_work.health = 'attention' or (v_work.health = 'backoff' and v_now < v_work.next_attempt_at) then
    return row(v2_reconcile.run_id, v_work.requested_generation, 0,
               v_work.processed_generation = v_work.requested_generation, v_work.health,
               v_run.status)::engine.v2_report;
  end if;
  perform from engine.step_states as ss
   where ss.run_id = v2_reconcile.run_id order by ss.step_slug for update;

  loop
    v_action := engine._v2_next_action(v2_reconcile.run_id);
    exit when v_action is null or v_actions >= v2_reconcile.max_actions;
    begin
      if v_action = 'dispatch_b' then
        select s.step_slug, s.queue_name, coalesce(s.start_delay, 0) as start_delay
          into strict v_b
          from engine.steps as s
         where s.flow_slug = v_run.flow_slug and s.deps_count > 0;
        update engine.step_states as ss
           set status = 'started', started_at = v_now, remaining_deps = 0
         where ss.run_id = v2_reconcile.run_id and ss.step_slug = v_b.step_slug;
        select m.msg_id into strict v_message_id
          from pgmq.send(v_b.queue_name,
                         engine._task_message('v2', v2_reconcile.run_id, v_b.step_slug, 0),
                         v_now + pg_catalog.make_interval(secs => v_b.start_delay)) as m (msg_id);
        insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, queued_at,
                                       queue_name, message_id)
        values (v2_reconcile.run_id, v_b.step_slug, v_run.flow_slug, 0, 'queued', v_now,
                v_b.queue_name, v_message_id);
        perform engine._notify_listeners('engine_queue_' || v_b.queue_name);
      else
        update engine.runs as r
           set status = 'completed', completed_at = v_now, remaining_steps = 0,
               output = (select t.output from engine.step_tasks as t
                          join engine.steps as s on s.flow_slug = t.flow_slug
                                                and s.step_slug = t.step_slug
                         where t.run_id = v2_reconcile.run_id and s.deps_count > 0)
         where r.run_id = v2_reconcile.run_id
        returning r.* into v_run;
      end if;
      perform engine._hook('reconcile.action');
    exception when others then
      get stacked diagnostics v_sqlstate = returned_sqlstate, v_message = message_text,
                              v_context = pg_exception_context;
      v_failed := true;
    end;
    exit when v_failed;
    v_actions := v_actions + 1;
  end loop;

  if v_failed then
    v_errors := v_work.consecutive_errors + 1;
    insert into engine.engine_errors (run_id, generation, action, sqlstate, message, context,
                                      occurred_at)
    values (v2_reconcile.run_id, v_work.requested_generation, v_action, v_sqlstate, v_message,
            v_context, v_now);
    update engine.run_work as w
       set consecutive_errors = v_errors,
           health = case when v_errors >= v_limits.errors_before_attention
                         then 'attention' else 'backoff' end,
           next_attempt_at = v_now + pg_catalog.make_interval(secs => least(
             v_limits.backoff_base_seconds * pg_catalog.power(2, v_errors - 1),
             v_limits.backoff_cap_seconds)),
           attention_reason = case
             when v_errors >= v_limits.errors_before_attention
             then pg_catalog.format('%s consecutive engine errors; last: %s [%s] %s', v_errors,
                                    v_action, v_sqlstate, v_message) end
     where w.run_id = v2_reconcile.run_id
    returning w.* into v_work;
    -- the failed action was rolled back: report the run as it stands, not as the action left it
    return row(v2_reconcile.run_id, v_work.requested_generation, v_actions, false, v_work.health,
               (select r.status from engine.runs as r where r.run_id = v2_reconcile.run_id)
              )::engine.v2_report;
  end if;

  perform engine._hook('reconcile.before_mark_processed');
  if v_action is null
     and (v_work.processed_generation <> v_work.requested_generation or v_work.health <> 'clean') then
    update engine.run_work as w
       set processed_generation = v_work.requested_generation,
           health = 'clean', consecutive_errors = 0, next_attempt_at = null, attention_reason = null
     where w.run_id = v2_reconcile.run_id
    returning w.* into v_work;
  elsif v_actions > 0 and v_work.health <> 'clean' then
    update engine.run_work as w
       set health = 'clean', consecutive_errors = 0, next_attempt_at = null, attention_reason = null
     where w.run_id = v2_reconcile.run_id
    returning w.* into v_work;
  end if;
  return row(v2_reconcile.run_id, v_work.requested_generation, v_actions,
             v_work.processed_generation = v_work.requested_generation, v_work.health,
             v_run.status)::engine.v2_report;
end;
$$;
