-- _v2_delivery: the argument and identity checks shared by v2_claim and v2_take_over, done
-- before any lock, scan or write. Returns the one message id.
-- Refuses: DR003 message_ids is not exactly one non-null id ({}, {1,2}, {5,5}, {NULL})
--   · DR014 unknown run, or a step the run's flow does not have · DR015 a v1 run
--   · DR004 the pair (queue_name, message id) is not the stored snapshot of the task of
--     (run, step), or not the step's route (a wrong queue, a wrong message, a wrong step, or a
--     step whose task does not exist yet). Snapshots never change, so no lock is needed.
create function engine._v2_delivery(run_id uuid, step_slug text, queue_name text, message_ids bigint[])
returns bigint
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_protocol text;
  v_flow text;
  v_route text;
  v_task_queue text;
  v_task_message bigint;
begin
  if _v2_delivery.message_ids is null
     or pg_catalog.array_ndims(_v2_delivery.message_ids) is distinct from 1
     or pg_catalog.cardinality(_v2_delivery.message_ids) <> (engine._v2_envelope()).message_ids_per_call
     or pg_catalog.array_position(_v2_delivery.message_ids, null) is not null then
    raise exception 'run %, step %: message_ids % is not exactly one message id',
      _v2_delivery.run_id, _v2_delivery.step_slug,
      pg_catalog.quote_nullable(_v2_delivery.message_ids::text)
      using errcode = 'DR003';
  end if;

  select r.protocol, r.flow_slug, s.queue_name, t.queue_name, t.message_id
    into v_protocol, v_flow, v_route, v_task_queue, v_task_message
    from engine.runs as r
    left join engine.steps as s on s.flow_slug = r.flow_slug and s.step_slug = _v2_delivery.step_slug
    left join engine.step_tasks as t
      on t.run_id = r.run_id and t.step_slug = _v2_delivery.step_slug and t.task_index = 0
   where r.run_id = _v2_delivery.run_id;
  if v_protocol is null then
    raise exception 'unknown run %', pg_catalog.quote_nullable(_v2_delivery.run_id::text)
      using errcode = 'DR014';
  end if;
  if v_protocol <> 'v2' then
    raise exception 'run % is a % run, not v2', _v2_delivery.run_id, v_protocol
      using errcode = 'DR015';
  end if;
  if v_route is null then
    raise exception 'run %: flow % has no step %', _v2_delivery.run_id, v_flow,
      pg_catalog.quote_nullable(_v2_delivery.step_slug)
      using errcode = 'DR014';
  end if;

  if v_task_queue is distinct from _v2_delivery.queue_name
     or v_task_message is distinct from _v2_delivery.message_ids[pg_catalog.array_lower(_v2_delivery.message_ids, 1)]
     or v_route is distinct from _v2_delivery.queue_name then
    raise exception 'run %, step %: message (%, %) is not this task''s message (%, %)',
      _v2_delivery.run_id, _v2_delivery.step_slug,
      pg_catalog.quote_nullable(_v2_delivery.queue_name),
      _v2_delivery.message_ids[pg_catalog.array_lower(_v2_delivery.message_ids, 1)],
      coalesce(v_task_queue, 'no task yet'), coalesce(v_task_message::text, '-')
      using errcode = 'DR004';
  end if;
  return v_task_message;
end;
$$;
