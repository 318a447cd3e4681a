-- prune_data_older_than: delete terminal runs (with their step_states and step_tasks) that
-- ended before now - retention, and archived messages older than that from the archive
-- tables of the queues the engine routes to (step routes and plain flows' queues), except the
-- messages a task still snapshots: a run that is not pruned (non-terminal, or ended after the
-- cutoff) keeps its archive. Non-terminal runs are never touched.
-- Locks: the pruned runs (row locks taken by the delete).
-- Refuses: DR008 retention is null or negative.
-- Writes: deletes runs, step_states, step_tasks, and rows of pgmq.a_<queue> of engine queues.
-- Returns the number of runs pruned.
create function engine.prune_data_older_than(retention interval)
returns integer
language plpgsql security definer
set search_path = pg_catalog, pg_temp
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
    select pg_catalog.lower(f.flow_slug) from engine.flows as f where f.queue_mode = 'flow'
    order by 1
  loop
    if pg_catalog.to_regclass(pg_catalog.format('pgmq.%I', 'a_' || v_queue)) is not null then
      execute pg_catalog.format(
        'delete from pgmq.%I as a where a.archived_at < $1 and not exists ('
        'select from engine.step_tasks as t where t.queue_name = $2 and t.message_id = a.msg_id)',
        'a_' || v_queue)
        using v_cutoff, v_queue;
    end if;
  end loop;
  return v_pruned;
end;
$$;
