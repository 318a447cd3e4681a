-- delete_flow: remove a flow with its runs, tasks and queue (messages dropped with the queue,
-- no per-message archive first).
-- Locks: definition (the flow row for update) -> its runs (for update).
-- Refuses: DR014 unknown flow.
-- Writes: deletes runs (with step_states and step_tasks), deps, steps, the flow; drops its queue.
create function engine.delete_flow(flow_slug text)
returns void
language plpgsql security definer
set search_path = ''
as $$
begin
  perform from engine.flows as f where f.flow_slug = delete_flow.flow_slug for update;
  if not found then
    raise exception 'unknown flow %', pg_catalog.quote_nullable(delete_flow.flow_slug)
      using errcode = 'DR014';
  end if;

  perform from engine.runs as r where r.flow_slug = delete_flow.flow_slug order by r.run_id for update;
  delete from engine.runs as r where r.flow_slug = delete_flow.flow_slug;
  delete from engine.deps as d where d.flow_slug = delete_flow.flow_slug;
  delete from engine.steps as s where s.flow_slug = delete_flow.flow_slug;
  delete from engine.flows as f where f.flow_slug = delete_flow.flow_slug;

  if exists (select from pgmq.list_queues() as q
              where pg_catalog.lower(q.queue_name) = pg_catalog.lower(delete_flow.flow_slug)) then
    perform pgmq.drop_queue(delete_flow.flow_slug);
  end if;
end;
$$;
