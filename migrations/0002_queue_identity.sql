-- 0002_queue_identity.sql: persisted queue identity (CONTRACT section 1).
-- Every step persists its route (steps.queue_name = lower(flow_slug) for plain flows); every
-- task snapshots the physical pair (queue_name, message_id) it was sent as, unique where
-- message_id is not null; later message operations use the snapshot. Flows whose default queue
-- names normalize to the same name are refused (DR012).
-- Upgrade of a populated baseline: existing steps get their route; existing tasks get the queue
-- their message was actually sent to: the baseline sent to pgmq name flow_slug, which PGMQ
-- stores in table q_<lower(flow_slug)>, so the snapshot is lower(flow_slug).
-- No automatic renaming or repair: a row that violates a new rule rolls the whole migration
-- back with a message naming the rows. The runner bounds lock waits (lock_timeout).

-- flows whose default queue names collide cannot be upgraded automatically
do $$
declare
  v_groups text;
begin
  select pg_catalog.string_agg(pg_catalog.format('%s (flows %s)', g.name, g.slugs), '; ' order by g.name)
    into v_groups
    from (select pg_catalog.lower(f.flow_slug) as name,
                 pg_catalog.string_agg(f.flow_slug, ', ' order by f.flow_slug) as slugs
            from engine.flows as f
           group by 1
          having pg_catalog.count(*) > 1) as g;
  if v_groups is not null then
    raise exception 'cannot persist queue identity: flows share a default queue name: %', v_groups
      using errcode = 'DR012',
            hint = 'Delete or recreate one flow of each group under another slug, then upgrade again. This migration renames nothing.';
  end if;
end;
$$;

create unique index flow_default_queue_names_are_unique on engine.flows (lower(flow_slug));

alter table engine.steps add column queue_name text;
update engine.steps as s set queue_name = pg_catalog.lower(s.flow_slug);
alter table engine.steps alter column queue_name set not null;
alter table engine.steps add constraint step_route_is_a_lower_case_pgmq_name
  check (queue_name ~ '^[a-z_][a-z0-9_]*$' and length(queue_name) <= 47);
create index steps_by_route on engine.steps (queue_name);

alter table engine.step_tasks add column queue_name text;
update engine.step_tasks as t set queue_name = pg_catalog.lower(t.flow_slug)
 where t.message_id is not null;
alter table engine.step_tasks add constraint message_identity_is_complete_or_absent
  check ((queue_name is null) = (message_id is null));
drop index engine.step_tasks_by_flow_message;
create unique index one_task_per_physical_message on engine.step_tasks (queue_name, message_id)
  where message_id is not null;



-- ----- 0335_function__reserve_queue_name.sql
-- _reserve_queue_name: check that flow_slug may use queue_name before anything is written.
-- A name is taken when another flow reserves it (its default lower(flow_slug)) or routes to
-- it, or when PGMQ already has a queue of that name (compared lower-cased) that is not this
-- flow's own route.
-- Locks: a transaction advisory lock on the name (key space 7100) so that concurrent
-- definitions of colliding names serialize.
-- Refuses: DR012 naming the queue, the flow that wants it and who holds it.
create or replace function engine._reserve_queue_name(flow_slug text, queue_name text)
returns void
language plpgsql
set search_path = ''
as $$
declare
  v_name text := pg_catalog.lower(_reserve_queue_name.queue_name);
  v_holder text;
begin
  perform pg_catalog.pg_advisory_xact_lock(7100, pg_catalog.hashtext(v_name));

  select f.flow_slug into v_holder
    from engine.flows as f
   where pg_catalog.lower(f.flow_slug) = v_name and f.flow_slug <> _reserve_queue_name.flow_slug
   limit 1;
  if v_holder is null then
    select s.flow_slug into v_holder
      from engine.steps as s
     where s.queue_name = v_name and s.flow_slug <> _reserve_queue_name.flow_slug
     limit 1;
  end if;
  if v_holder is not null then
    raise exception 'queue name % wanted by flow % is taken by flow %',
      v_name, _reserve_queue_name.flow_slug, v_holder
      using errcode = 'DR012';
  end if;

  if exists (select from pgmq.list_queues() as q where pg_catalog.lower(q.queue_name) = v_name)
     and not exists (select from engine.steps as s
                      where s.flow_slug = _reserve_queue_name.flow_slug and s.queue_name = v_name)
     and not exists (select from engine.flows as f
                      where f.flow_slug = _reserve_queue_name.flow_slug
                        and pg_catalog.lower(f.flow_slug) = v_name) then
    raise exception 'queue % wanted by flow % already exists in PGMQ and is not owned by that flow',
      v_name, _reserve_queue_name.flow_slug
      using errcode = 'DR012',
            hint = 'Drop or rename the other queue, or give the flow another slug.';
  end if;
end;
$$;


-- ----- 0340_function__start_ready_steps.sql
-- _start_ready_steps: start every created step of a run whose dependencies have all completed.
-- Each such step state becomes started, its single task is created and its message is sent to
-- the step's stored route, delayed by the step's start_delay; the task snapshots the pair
-- (queue_name, message_id) it was sent as.
-- Locks: the run's step_states in step_slug order (the caller already holds the run).
-- Writes: step_states (started), step_tasks (queued, with message_id), one PGMQ message each.
create or replace function engine._start_ready_steps(run_id uuid, now timestamptz)
returns integer
language plpgsql
set search_path = ''
as $$
declare
  v_step record;
  v_message_id bigint;
  v_started integer := 0;
begin
  for v_step in
    select ss.step_slug, ss.flow_slug, s.queue_name, coalesce(s.start_delay, 0) as start_delay
      from engine.step_states as ss
      join engine.steps as s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
     where ss.run_id = _start_ready_steps.run_id
       and ss.status = 'created'
       and ss.remaining_deps = 0
     order by ss.step_slug
       for update of ss
  loop
    update engine.step_states as ss
       set status = 'started', started_at = _start_ready_steps.now
     where ss.run_id = _start_ready_steps.run_id and ss.step_slug = v_step.step_slug;

    select m.msg_id into strict v_message_id
      from pgmq.send(
        v_step.queue_name,
        engine._task_message('v1', _start_ready_steps.run_id, v_step.step_slug, 0),
        _start_ready_steps.now + pg_catalog.make_interval(secs => v_step.start_delay)
      ) as m (msg_id);

    insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, queue_name,
                                   message_id, queued_at)
    values (_start_ready_steps.run_id, v_step.step_slug, v_step.flow_slug, 0, 'queued',
            v_step.queue_name, v_message_id, _start_ready_steps.now);

    v_started := v_started + 1;
  end loop;
  return v_started;
end;
$$;


-- ----- 0350_function__fail_run.sql
-- _fail_run: fail a started run and terminalize everything unfinished in it, so that no
-- sibling task is left queued or started on a failed run.
-- Locks: (the caller holds the run) step_states by step_slug -> step_tasks by
-- (step_slug, task_index) -> their messages by message_id.
-- Writes: runs (failed), step_states created/started -> cancelled, step_tasks queued/started
-- -> cancelled, and archives the cancelled tasks' messages.
create or replace function engine._fail_run(run_id uuid, now timestamptz)
returns void
language plpgsql
set search_path = ''
as $$
declare
  v_task record;
begin
  update engine.runs as r
     set status = 'failed', failed_at = _fail_run.now
   where r.run_id = _fail_run.run_id and r.status = 'started';

  perform
    from engine.step_states as ss
   where ss.run_id = _fail_run.run_id and ss.status in ('created', 'started')
   order by ss.step_slug
     for update;
  update engine.step_states as ss
     set status = 'cancelled', failed_at = _fail_run.now
   where ss.run_id = _fail_run.run_id and ss.status in ('created', 'started');

  perform
    from engine.step_tasks as t
   where t.run_id = _fail_run.run_id and t.status in ('queued', 'started')
   order by t.step_slug, t.task_index
     for update;
  for v_task in
    select t.queue_name, t.message_id
      from engine.step_tasks as t
     where t.run_id = _fail_run.run_id and t.status in ('queued', 'started')
       and t.message_id is not null
     order by t.queue_name, t.message_id
  loop
    perform pgmq.archive(v_task.queue_name, v_task.message_id);
  end loop;
  update engine.step_tasks as t
     set status = 'cancelled', failed_at = _fail_run.now
   where t.run_id = _fail_run.run_id and t.status in ('queued', 'started');
end;
$$;


-- ----- 0510_function_start_tasks.sql
-- start_tasks: a v1 worker claims the queued tasks behind the messages it has read.
-- Only rows that the guarded UPDATE ... RETURNING actually changed are granted, so two
-- sessions claiming one message get one winner. Each winner's message becomes invisible
-- until the effective step timeout + 2 s. Messages match on the task's snapshot
-- (queue_name, message_id) only, so an equal id in another queue never matches. Unknown
-- message ids are ignored (no grant, no write). Queue names compare lower-cased, as in PGMQ.
-- Locks: candidate step_tasks by (run_id, step_slug, task_index) -> their messages.
-- Writes: step_tasks (started, attempts_count + 1), the winners' message vt.
create or replace function engine.start_tasks(queue_name text, message_ids bigint[])
returns setof engine.task_grant
language plpgsql security definer
set search_path = ''
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_task record;
begin
  for v_task in
    update engine.step_tasks as t
       set status = 'started',
           attempts_count = t.attempts_count + 1,
           started_at = v_now
      from (select c.run_id, c.step_slug, c.task_index
              from engine.step_tasks as c
              join engine.runs as r on r.run_id = c.run_id
             where c.queue_name = pg_catalog.lower(start_tasks.queue_name)
               and c.message_id = any (start_tasks.message_ids)
               and c.status = 'queued'
               and r.status = 'started'
             order by c.run_id, c.step_slug, c.task_index
               for update of c) as candidate,
           engine.steps as s,
           engine.flows as f
     where t.run_id = candidate.run_id
       and t.step_slug = candidate.step_slug
       and t.task_index = candidate.task_index
       and t.status = 'queued'
       and s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
       and f.flow_slug = t.flow_slug
    returning t.run_id, t.step_slug, t.task_index, t.queue_name, t.message_id,
              coalesce(s.timeout, f.timeout) as timeout
  loop
    perform pgmq.set_vt(v_task.queue_name, v_task.message_id,
                        v_now + pg_catalog.make_interval(secs => v_task.timeout + 2));
    return next row(v_task.run_id, v_task.step_slug, v_task.task_index, v_task.queue_name,
                    v_task.message_id, engine._task_input(v_task.run_id, v_task.step_slug)
                   )::engine.task_grant;
  end loop;
end;
$$;


-- ----- 0520_function_complete_task.sql
-- complete_task: a v1 worker reports a handler result; the cascade starts dependents whose
-- dependencies are now all completed and completes the run after its last step.
-- The output is stored exactly as given (JSON null, 0, false, "", [] and {} included).
-- A task that is no longer started (its run failed meanwhile, or it was completed or
-- requeued) is left as it is and returned unchanged.
-- Locks: run (for update) -> step_states by step_slug -> the task -> its message.
-- Refuses: DR014 unknown run or task · DR009 output is SQL NULL.
-- Writes: step_tasks (completed), archives its message, step_states (completed; dependents'
--         remaining_deps - 1), runs (remaining_steps - 1; completed with the leaf outputs),
--         dependents' tasks and messages.
create or replace function engine.complete_task(run_id uuid, step_slug text, task_index integer, output jsonb)
returns engine.step_tasks
language plpgsql security definer
set search_path = ''
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

  select r.* into v_run from engine.runs as r where r.run_id = complete_task.run_id for update;
  if not found then
    raise exception 'unknown run %', complete_task.run_id using errcode = 'DR014';
  end if;

  perform
    from engine.step_states as ss
   where ss.run_id = complete_task.run_id
     and (ss.step_slug = complete_task.step_slug
          or ss.step_slug in (select d.step_slug from engine.deps as d
                               where d.flow_slug = v_run.flow_slug
                                 and d.dep_slug = complete_task.step_slug))
   order by ss.step_slug
     for update;

  select t.* into v_task
    from engine.step_tasks as t
   where t.run_id = complete_task.run_id and t.step_slug = complete_task.step_slug
     and t.task_index = complete_task.task_index
     for update;
  if not found then
    raise exception 'run %: unknown task %[%]', complete_task.run_id, complete_task.step_slug,
      complete_task.task_index
      using errcode = 'DR014';
  end if;
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
-- Refuses: DR014 unknown run or task.
-- Writes: step_tasks, its message (vt on retry, archive on the last failure), step_states and
--         runs on the last failure.
create or replace function engine.fail_task(run_id uuid, step_slug text, task_index integer, error_message text)
returns engine.step_tasks
language plpgsql security definer
set search_path = ''
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_run engine.runs;
  v_task engine.step_tasks;
  v_max_attempts integer;
  v_base_delay integer;
begin
  select r.* into v_run from engine.runs as r where r.run_id = fail_task.run_id for update;
  if not found then
    raise exception 'unknown run %', fail_task.run_id using errcode = 'DR014';
  end if;

  perform
    from engine.step_states as ss
   where ss.run_id = fail_task.run_id
   order by ss.step_slug
     for update;

  select t.* into v_task
    from engine.step_tasks as t
   where t.run_id = fail_task.run_id and t.step_slug = fail_task.step_slug
     and t.task_index = fail_task.task_index
     for update;
  if not found then
    raise exception 'run %: unknown task %[%]', fail_task.run_id, fail_task.step_slug,
      fail_task.task_index
      using errcode = 'DR014';
  end if;
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


-- ----- 0540_function_requeue_stalled_tasks.sql
-- requeue_stalled_tasks: recover v1 tasks whose worker went silent. A started task whose
-- started_at + effective step timeout + 2 s has passed is queued again and its message made
-- visible now; a stalled task that has used its last attempt fails with its run instead.
-- Locks: per task, run (for update) -> step_states by step_slug -> the task -> its message.
-- Writes: step_tasks, message vt (requeue) or archive (last attempt), step_states and runs on
--         the last attempt.
-- Returns the number of tasks queued again.
create or replace function engine.requeue_stalled_tasks()
returns integer
language plpgsql security definer
set search_path = ''
as $$
declare
  v_now timestamptz := pg_catalog.clock_timestamp();
  v_candidate record;
  v_task engine.step_tasks;
  v_requeued integer := 0;
  v_error text;
begin
  for v_candidate in
    select t.run_id, t.step_slug, t.task_index,
           coalesce(s.timeout, f.timeout) as timeout,
           coalesce(s.max_attempts, f.max_attempts) as max_attempts
      from engine.step_tasks as t
      join engine.steps as s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join engine.flows as f on f.flow_slug = t.flow_slug
     where t.status = 'started'
       and t.started_at + pg_catalog.make_interval(secs => coalesce(s.timeout, f.timeout) + 2) < v_now
     order by t.run_id, t.step_slug, t.task_index
  loop
    perform from engine.runs as r
     where r.run_id = v_candidate.run_id and r.status = 'started'
       for update;
    continue when not found;
    perform from engine.step_states as ss
     where ss.run_id = v_candidate.run_id order by ss.step_slug for update;
    select t.* into v_task
      from engine.step_tasks as t
     where t.run_id = v_candidate.run_id and t.step_slug = v_candidate.step_slug
       and t.task_index = v_candidate.task_index
       and t.status = 'started'
       and t.started_at + pg_catalog.make_interval(secs => v_candidate.timeout + 2) < v_now
       for update;
    continue when not found;

    v_error := pg_catalog.format('stalled: no result within the step timeout of %s s + 2 s',
                                 v_candidate.timeout);
    if v_task.attempts_count < v_candidate.max_attempts then
      update engine.step_tasks as t
         set status = 'queued', queued_at = v_now, error_message = v_error
       where t.run_id = v_task.run_id and t.step_slug = v_task.step_slug
         and t.task_index = v_task.task_index;
      perform pgmq.set_vt(v_task.queue_name, v_task.message_id, v_now);
      v_requeued := v_requeued + 1;
    else
      update engine.step_tasks as t
         set status = 'failed', failed_at = v_now, error_message = v_error
       where t.run_id = v_task.run_id and t.step_slug = v_task.step_slug
         and t.task_index = v_task.task_index;
      perform pgmq.archive(v_task.queue_name, v_task.message_id);
      update engine.step_states as ss
         set status = 'failed', failed_at = v_now, error_message = v_error
       where ss.run_id = v_task.run_id and ss.step_slug = v_task.step_slug;
      perform engine._fail_run(v_task.run_id, v_now);
    end if;
  end loop;
  return v_requeued;
end;
$$;


-- ----- 0550_function_prune_data_older_than.sql
-- prune_data_older_than: delete terminal runs (with their step_states and step_tasks) that
-- ended before now - retention, and archived messages older than that from the archive
-- tables of the queues the engine routes to (step routes and plain flows' queues).
-- Non-terminal runs are never touched.
-- Locks: the pruned runs (row locks taken by the delete).
-- Refuses: DR008 retention is null or negative.
-- Writes: deletes runs, step_states, step_tasks, and rows of pgmq.a_<queue> of engine queues.
-- Returns the number of runs pruned.
create or replace function engine.prune_data_older_than(retention interval)
returns integer
language plpgsql security definer
set search_path = ''
as $$
declare
  v_cutoff timestamptz;
  v_pruned integer;
  v_queue text;
begin
  if prune_data_older_than.retention is null or prune_data_older_than.retention < interval '0' then
    raise exception 'retention % is out of range', pg_catalog.quote_nullable(prune_data_older_than.retention::text)
      using errcode = 'DR008', hint = 'Pass a non-negative interval, for example interval ''7 days''.';
  end if;
  v_cutoff := pg_catalog.clock_timestamp() - prune_data_older_than.retention;

  delete from engine.runs as r
   where r.status in ('completed', 'failed')
     and coalesce(r.completed_at, r.failed_at) < v_cutoff;
  get diagnostics v_pruned = row_count;

  for v_queue in
    select s.queue_name from engine.steps as s
    union
    select pg_catalog.lower(f.flow_slug) from engine.flows as f
    order by 1
  loop
    if pg_catalog.to_regclass(pg_catalog.format('pgmq.%I', 'a_' || v_queue)) is not null then
      execute pg_catalog.format('delete from pgmq.%I as a where a.archived_at < $1', 'a_' || v_queue)
        using v_cutoff;
    end if;
  end loop;
  return v_pruned;
end;
$$;


-- ----- 0420_function_delete_flow.sql
-- delete_flow: remove a flow with its runs, tasks and the queues it routes to (a plain flow's
-- queue, a step-queued flow's private queues), messages dropped with the queues and no
-- per-message archive first. A queue the flow does not route to is never dropped.
-- Locks: definition (the flow row for update) -> its runs (for update).
-- Refuses: DR014 unknown flow.
-- Writes: deletes runs (with step_states and step_tasks), deps, steps, the flow; drops queues.
create or replace function engine.delete_flow(flow_slug text)
returns void
language plpgsql security definer
set search_path = ''
as $$
declare
  v_routes text[];
  v_queue text;
begin
  perform from engine.flows as f where f.flow_slug = delete_flow.flow_slug for update;
  if not found then
    raise exception 'unknown flow %', pg_catalog.quote_nullable(delete_flow.flow_slug)
      using errcode = 'DR014';
  end if;

  select pg_catalog.array_agg(distinct r.name)
    into v_routes
    from (select s.queue_name as name from engine.steps as s
           where s.flow_slug = delete_flow.flow_slug
          union all
          select pg_catalog.lower(f.flow_slug) from engine.flows as f
           where f.flow_slug = delete_flow.flow_slug) as r;

  perform from engine.runs as r where r.flow_slug = delete_flow.flow_slug order by r.run_id for update;
  delete from engine.runs as r where r.flow_slug = delete_flow.flow_slug;
  delete from engine.deps as d where d.flow_slug = delete_flow.flow_slug;
  delete from engine.steps as s where s.flow_slug = delete_flow.flow_slug;
  delete from engine.flows as f where f.flow_slug = delete_flow.flow_slug;

  for v_queue in
    select q.queue_name from pgmq.list_queues() as q
     where pg_catalog.lower(q.queue_name) = any (v_routes)
     order by 1
  loop
    perform pgmq.drop_queue(v_queue);
  end loop;
end;
$$;


-- ----- create_flow with persisted routes (0003 adds queue_mode)
-- create_flow: define a flow (its options are its steps' defaults) and create its queue.
-- Locks: the flow row (insert, or for update when it exists).
-- Refuses: DR001 invalid slug, default queue name over 47 characters or option out of range
--          · DR016 the flow exists with different options.
-- Writes: flows, one PGMQ queue named by the flow slug (when missing).
-- Defining the same flow again with identical options is a no-op that returns the row.
create or replace function engine.create_flow(
  flow_slug text,
  max_attempts integer default 3,
  base_delay integer default 1,
  timeout integer default 60
) returns engine.flows
language plpgsql security definer
set search_path = ''
as $$
declare
  v_flow engine.flows;
begin
  if not engine._is_valid_slug(create_flow.flow_slug) then
    raise exception 'flow slug % is not a valid slug', pg_catalog.quote_nullable(create_flow.flow_slug)
      using errcode = 'DR001',
            hint = 'A slug matches ^[A-Za-z_][A-Za-z0-9_]*$ and has at most 128 characters.';
  end if;
  if pg_catalog.length(create_flow.flow_slug) > 47 then
    raise exception 'flow % reserves queue name %, which is longer than 47 characters',
      create_flow.flow_slug, pg_catalog.lower(create_flow.flow_slug)
      using errcode = 'DR001';
  end if;
  if create_flow.max_attempts is null or create_flow.max_attempts < 1
     or create_flow.base_delay is null or create_flow.base_delay < 0
     or create_flow.timeout is null or create_flow.timeout < 1 then
    raise exception 'flow %: options out of range (max_attempts %, base_delay %, timeout %)',
      create_flow.flow_slug, create_flow.max_attempts, create_flow.base_delay, create_flow.timeout
      using errcode = 'DR001',
            hint = 'max_attempts >= 1, base_delay >= 0, timeout >= 1 (seconds), none null.';
  end if;

  perform engine._reserve_queue_name(create_flow.flow_slug, create_flow.flow_slug);
  insert into engine.flows as f (flow_slug, max_attempts, base_delay, timeout)
  values (create_flow.flow_slug, create_flow.max_attempts, create_flow.base_delay,
          create_flow.timeout)
  on conflict on constraint flows_are_identified_by_slug do nothing
  returning f.* into v_flow;

  if v_flow.flow_slug is null then  -- exists already: compare
    select f.* into strict v_flow
      from engine.flows as f
     where f.flow_slug = create_flow.flow_slug
       for update;
    if (v_flow.max_attempts, v_flow.base_delay, v_flow.timeout)
       is distinct from (create_flow.max_attempts, create_flow.base_delay, create_flow.timeout) then
      raise exception 'flow % already exists with different options', create_flow.flow_slug
        using errcode = 'DR016',
              detail = pg_catalog.format(
                'existing: max_attempts %s, base_delay %s, timeout %s; given: max_attempts %s, base_delay %s, timeout %s',
                v_flow.max_attempts, v_flow.base_delay, v_flow.timeout,
                create_flow.max_attempts, create_flow.base_delay, create_flow.timeout);
    end if;
    return v_flow;
  end if;

  perform engine._ensure_queue(pg_catalog.lower(create_flow.flow_slug));
  return v_flow;
end;
$$;


-- ----- add_step with persisted routes (0003 adds private queues)
-- add_step: add a single-task step to a flow; its deps must already be steps of the flow, so a
-- cycle can only be a step naming itself.
-- Locks: definition (the flow row for update).
-- Refuses: DR014 unknown flow or dependency · DR001 invalid or reserved slug, null, duplicate
--          or self dependency, option out of range · DR016 the step exists with other options.
-- Writes: steps, deps.
-- Defining the same step again with identical options is a no-op that returns the row.
create or replace function engine.add_step(
  flow_slug text,
  step_slug text,
  deps text[] default '{}',
  max_attempts integer default null,
  base_delay integer default null,
  timeout integer default null,
  start_delay integer default null
) returns engine.steps
language plpgsql security definer
set search_path = ''
as $$
declare
  v_deps text[] := coalesce(add_step.deps, '{}');
  v_step engine.steps;
  v_existing_deps text[];
  v_unknown text[];
begin
  perform from engine.flows as f where f.flow_slug = add_step.flow_slug for update;
  if not found then
    raise exception 'unknown flow %', pg_catalog.quote_nullable(add_step.flow_slug)
      using errcode = 'DR014';
  end if;

  if not engine._is_valid_slug(add_step.step_slug) then
    raise exception 'flow %: step slug % is not a valid slug',
      add_step.flow_slug, pg_catalog.quote_nullable(add_step.step_slug)
      using errcode = 'DR001',
            hint = 'A slug matches ^[A-Za-z_][A-Za-z0-9_]*$ and has at most 128 characters.';
  end if;
  if add_step.step_slug = 'run' then
    raise exception 'flow %: step slug "run" is reserved for the run input', add_step.flow_slug
      using errcode = 'DR001';
  end if;
  if pg_catalog.array_position(v_deps, null) is not null then
    raise exception 'flow %, step %: deps contain a null', add_step.flow_slug, add_step.step_slug
      using errcode = 'DR001';
  end if;
  if add_step.step_slug = any (v_deps) then
    raise exception 'flow %, step %: a step cannot depend on itself (cycle)',
      add_step.flow_slug, add_step.step_slug
      using errcode = 'DR001';
  end if;
  if (select pg_catalog.count(distinct d) from pg_catalog.unnest(v_deps) as d)
     <> pg_catalog.cardinality(v_deps) then
    raise exception 'flow %, step %: duplicate dependency in %',
      add_step.flow_slug, add_step.step_slug, v_deps
      using errcode = 'DR001';
  end if;
  if add_step.max_attempts < 1 or add_step.base_delay < 0 or add_step.timeout < 1
     or add_step.start_delay < 0 then
    raise exception 'flow %, step %: options out of range (max_attempts %, base_delay %, timeout %, start_delay %)',
      add_step.flow_slug, add_step.step_slug, add_step.max_attempts, add_step.base_delay,
      add_step.timeout, add_step.start_delay
      using errcode = 'DR001',
            hint = 'max_attempts >= 1, base_delay >= 0, timeout >= 1, start_delay >= 0, or null to inherit.';
  end if;

  select s.* into v_step
    from engine.steps as s
   where s.flow_slug = add_step.flow_slug and s.step_slug = add_step.step_slug;
  if found then
    select coalesce(pg_catalog.array_agg(d.dep_slug order by d.dep_slug), '{}')
      into v_existing_deps
      from engine.deps as d
     where d.flow_slug = add_step.flow_slug and d.step_slug = add_step.step_slug;
    if v_existing_deps is distinct from
         (select coalesce(pg_catalog.array_agg(x order by x), '{}') from pg_catalog.unnest(v_deps) as x)
       or (v_step.max_attempts, v_step.base_delay, v_step.timeout, v_step.start_delay)
          is distinct from (add_step.max_attempts, add_step.base_delay, add_step.timeout,
                            add_step.start_delay) then
      raise exception 'flow %, step % already exists with different deps or options',
        add_step.flow_slug, add_step.step_slug
        using errcode = 'DR016',
              detail = pg_catalog.format(
                'existing: deps %s, max_attempts %s, base_delay %s, timeout %s, start_delay %s; given: deps %s, max_attempts %s, base_delay %s, timeout %s, start_delay %s',
                v_existing_deps, v_step.max_attempts, v_step.base_delay, v_step.timeout,
                v_step.start_delay, v_deps, add_step.max_attempts, add_step.base_delay,
                add_step.timeout, add_step.start_delay);
    end if;
    return v_step;
  end if;

  select pg_catalog.array_agg(x order by x) into v_unknown
    from pg_catalog.unnest(v_deps) as x
   where not exists (
     select from engine.steps as s where s.flow_slug = add_step.flow_slug and s.step_slug = x);
  if v_unknown is not null then
    raise exception 'flow %, step %: unknown dependencies %',
      add_step.flow_slug, add_step.step_slug, v_unknown
      using errcode = 'DR014',
            hint = 'Add a step before the steps that depend on it.';
  end if;

  insert into engine.steps as s (flow_slug, step_slug, step_index, deps_count, max_attempts,
                                 base_delay, timeout, start_delay, queue_name)
  values (add_step.flow_slug, add_step.step_slug,
          (select pg_catalog.count(*) from engine.steps as s2 where s2.flow_slug = add_step.flow_slug),
          pg_catalog.cardinality(v_deps), add_step.max_attempts, add_step.base_delay,
          add_step.timeout, add_step.start_delay, pg_catalog.lower(add_step.flow_slug))
  returning s.* into v_step;

  insert into engine.deps (flow_slug, dep_slug, step_slug)
  select add_step.flow_slug, x, add_step.step_slug from pg_catalog.unnest(v_deps) as x;

  return v_step;
end;
$$;


-- ----- privileges
revoke all on all functions in schema engine from public;
