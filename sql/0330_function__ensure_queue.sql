-- _ensure_queue: create a PGMQ queue the engine owns (when missing) and let engine_worker
-- read it and set its visibility. PGMQ's read and set_vt run with the caller's rights.
create function engine._ensure_queue(queue_name text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if not exists (
    select from pgmq.list_queues() as q
    where pg_catalog.lower(q.queue_name) = pg_catalog.lower(_ensure_queue.queue_name)
  ) then
    perform pgmq.create(_ensure_queue.queue_name);
  end if;
  execute pg_catalog.format(
    'grant select, update (vt, read_ct, last_read_at) on table pgmq.%I to engine_worker',
    'q_' || pg_catalog.lower(_ensure_queue.queue_name));
end;
$$;
