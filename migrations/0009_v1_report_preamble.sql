-- 0009_v1_report_preamble.sql: complete_task and fail_task share their preamble (issue 13):
-- _v1_report_run refuses an unknown (DR014) or v2 (DR010) run before any lock and locks the
-- run; _v1_report_task locks the named task (DR014 when unknown). Same behaviour, same lock
-- order (run -> step states -> task), same messages; no table changes.

-- ----- 0390_function__v1_report_run.sql
-- _v1_report_run: the preamble of the v1 reports (complete_task, fail_task). Refuses before
-- taking any lock, then locks the run.
-- Locks: run (for update).
-- Refuses: DR014 unknown run · DR010 a v2 run (a v1 writer never writes v2 state).
create or replace function engine._v1_report_run(run_id uuid, writer text)
returns engine.runs
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_run engine.runs;
begin
  select r.* into v_run from engine.runs as r where r.run_id = _v1_report_run.run_id;
  if not found then
    raise exception 'unknown run %', _v1_report_run.run_id using errcode = 'DR014';
  end if;
  if v_run.protocol <> 'v1' then
    raise exception 'run % is a % run: % is a v1 writer and refuses it', _v1_report_run.run_id,
      v_run.protocol, _v1_report_run.writer
      using errcode = 'DR010', hint = 'A v2 task is settled with engine.v2_settle(claim_id, ...).';
  end if;
  select r.* into strict v_run from engine.runs as r where r.run_id = _v1_report_run.run_id for update;
  return v_run;
end;
$$;

-- ----- 0392_function__v1_report_task.sql
-- _v1_report_task: the task a v1 report names, locked (after its run and step states).
-- Locks: the task (for update).
-- Refuses: DR014 unknown task.
create or replace function engine._v1_report_task(run_id uuid, step_slug text, task_index integer)
returns engine.step_tasks
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_task engine.step_tasks;
begin
  select t.* into v_task
    from engine.step_tasks as t
   where t.run_id = _v1_report_task.run_id and t.step_slug = _v1_report_task.step_slug
     and t.task_index = _v1_report_task.task_index
     for update;
  if not found then
    raise exception 'run %: unknown task %[%]', _v1_report_task.run_id, _v1_report_task.step_slug,
      _v1_report_task.task_index
      using errcode = 'DR014';
  end if;
  return v_task;
end;
$$;

-- ----- 0520_function_complete_task.sql
-- complete_task: a v1 worker reports a handler result; the cascade starts dependents whose
-- dependencies are now all completed and completes the run after its last step.
-- The output is stored exactly as given (JSON null, 0, false, "", [] and {} included).
-- A task that is no longer started (its run failed meanwhile, or it was completed or
-- requeued) is left as it is and returned unchanged.
-- Locks: run (for update) -> step_states by step_slug -> the task -> its message.
-- Refuses: DR014 unknown run or task · DR009 output is SQL NULL · DR010 a v2 run.
-- Writes: step_tasks (completed), archives its message, step_states (completed; dependents'
--         remaining_deps - 1), runs (remaining_steps - 1; completed with the leaf outputs),
--         dependents' tasks and messages.
create or replace function engine.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb)
returns engine.step_tasks
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_run engine.runs;
  v_task engine.step_tasks;
begin
  if complete_task.output is null then
    raise exception 'run %, step %: output is SQL NULL', complete_task.run_id, complete_task.step_slug
      using errcode = 'DR009', hint = 'Pass ''null''::jsonb for a JSON null result.';
  end if;

  v_run := engine._v1_report_run(complete_task.run_id, 'complete_task');

  perform
    from engine.step_states as ss
   where ss.run_id = complete_task.run_id
     and (ss.step_slug = complete_task.step_slug
          or ss.step_slug in (select d.step_slug from engine.deps as d
                               where d.flow_slug = v_run.flow_slug
                                 and d.dep_slug = complete_task.step_slug))
   order by ss.step_slug
     for update;

  v_task := engine._v1_report_task(complete_task.run_id, complete_task.step_slug, complete_task.task_index);
  if v_run.status <> 'started' or v_task.status <> 'started' then
    return v_task;
  end if;

  update engine.step_tasks as t
     set status = 'completed', output = complete_task.output, completed_at = v_now
   where t.run_id = complete_task.run_id and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
  returning t.* into v_task;

  perform pgmq.archive(v_task.queue_name, v_task.message_id);

  update engine.step_states as ss
     set status = 'completed', completed_at = v_now
   where ss.run_id = complete_task.run_id and ss.step_slug = complete_task.step_slug;

  update engine.step_states as ss
     set remaining_deps = ss.remaining_deps - 1
   where ss.run_id = complete_task.run_id
     and ss.status = 'created'
     and ss.step_slug in (select d.step_slug from engine.deps as d
                           where d.flow_slug = v_run.flow_slug
                             and d.dep_slug = complete_task.step_slug);

  update engine.runs as r
     set remaining_steps = r.remaining_steps - 1
   where r.run_id = complete_task.run_id
  returning r.* into v_run;

  perform engine._start_ready_steps(complete_task.run_id, v_now);

  if v_run.remaining_steps = 0 then
    update engine.runs as r
       set status = 'completed',
           completed_at = v_now,
           output = (select coalesce(pg_catalog.jsonb_object_agg(t.step_slug, t.output), '{}'::jsonb)
                       from engine.step_tasks as t
                      where t.run_id = complete_task.run_id
                        and not exists (select from engine.deps as d
                                         where d.flow_slug = t.flow_slug
                                           and d.dep_slug = t.step_slug))
     where r.run_id = complete_task.run_id;
  end if;
  return v_task;
end;
$$;

-- ----- 0530_function_fail_task.sql
-- fail_task: a v1 worker reports a handler failure. While attempts remain the task is queued
-- again and its message becomes visible after base_delay * 2^(attempts - 1) seconds; the last
-- failure fails the step and the run, and terminalizes every unfinished task of the run.
-- A task that is no longer started is left as it is and returned unchanged.
-- Locks: run (for update) -> step_states by step_slug -> the task -> messages.
-- Refuses: DR014 unknown run or task · DR010 a v2 run.
-- Writes: step_tasks, its message (vt on retry, archive on the last failure), step_states and
--         runs on the last failure.
create or replace function engine.fail_task(run_id uuid, step_slug text, task_index integer, error_message text)
returns engine.step_tasks
language plpgsql security definer
set search_path = pg_catalog, pg_temp
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_run engine.runs;
  v_task engine.step_tasks;
  v_max_attempts integer;
  v_base_delay integer;
begin
  v_run := engine._v1_report_run(fail_task.run_id, 'fail_task');

  perform
    from engine.step_states as ss
   where ss.run_id = fail_task.run_id
   order by ss.step_slug
     for update;

  v_task := engine._v1_report_task(fail_task.run_id, fail_task.step_slug, fail_task.task_index);
  if v_run.status <> 'started' or v_task.status <> 'started' then
    return v_task;
  end if;

  select coalesce(s.max_attempts, f.max_attempts), coalesce(s.base_delay, f.base_delay)
    into strict v_max_attempts, v_base_delay
    from engine.steps as s
    join engine.flows as f on f.flow_slug = s.flow_slug
   where s.flow_slug = v_task.flow_slug and s.step_slug = v_task.step_slug;

  if v_task.attempts_count < v_max_attempts then
    update engine.step_tasks as t
       set status = 'queued', error_message = fail_task.error_message, queued_at = v_now
     where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug
       and t.task_index = fail_task.task_index
    returning t.* into v_task;
    perform pgmq.set_vt(
      v_task.queue_name, v_task.message_id,
      v_now + pg_catalog.make_interval(
        secs => v_base_delay * pg_catalog.power(2, v_task.attempts_count - 1)));
    return v_task;
  end if;

  update engine.step_tasks as t
     set status = 'failed', error_message = fail_task.error_message, failed_at = v_now
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
  returning t.* into v_task;
  perform pgmq.archive(v_task.queue_name, v_task.message_id);

  update engine.step_states as ss
     set status = 'failed', failed_at = v_now, error_message = fail_task.error_message
   where ss.run_id = fail_task.run_id and ss.step_slug = fail_task.step_slug;

  perform engine._fail_run(fail_task.run_id, v_now);
  return v_task;
end;
$$;

-- ----- privileges (as 9900_privileges.sql): the new helpers are executable by nobody but the owner
revoke all on all functions in schema engine from public;
