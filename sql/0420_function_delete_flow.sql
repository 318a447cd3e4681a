-- delete_flow: remove a flow with its runs, tasks and the queues it routes to (a plain flow's
-- queue, a step-queued flow's private queues), messages dropped with the queues and no
-- per-message archive first. A queue the flow does not route to is never dropped.
-- Locks: definition (the flow row for update) -> its runs (for update).
-- Refuses: DR014 unknown flow · DR011 a v2 run of the flow is not terminal.
-- Writes: deletes runs (with step_states and step_tasks), deps, steps, the flow; drops queues.
create function engine.delete_flow(flow_slug text)
returns void
language plpgsql security definer
set search_path = pg_catalog, pg_temp
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
  perform engine._assert_definition_unlocked(delete_flow.flow_slug, 'delete');

  select pg_catalog.array_agg(distinct r.name)
    into v_routes
    from (select s.queue_name as name from engine.steps as s
           where s.flow_slug = delete_flow.flow_slug
          union all
          select pg_catalog.lower(f.flow_slug) from engine.flows as f
           where f.flow_slug = delete_flow.flow_slug and f.queue_mode = 'flow') as r;

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
