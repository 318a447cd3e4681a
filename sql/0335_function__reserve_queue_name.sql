-- _reserve_queue_name: check that flow_slug may use queue_name before anything is written.
-- A name is taken when another flow reserves it (its default lower(flow_slug)) or routes to
-- it, or when PGMQ already has a queue of that name (compared lower-cased) that is not this
-- flow's own route.
-- Locks: a transaction advisory lock on the name (key space 7100) so that concurrent
-- definitions of colliding names serialize.
-- Refuses: DR012 naming the queue, the flow that wants it and who holds it.
create function engine._reserve_queue_name(flow_slug text, queue_name text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
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
                      where f.flow_slug = _reserve_queue_name.flow_slug and f.queue_mode = 'flow'
                        and pg_catalog.lower(f.flow_slug) = v_name) then
    raise exception 'queue % wanted by flow % already exists in PGMQ and is not owned by that flow',
      v_name, _reserve_queue_name.flow_slug
      using errcode = 'DR012',
            hint = 'Drop or rename the other queue, or give the flow another slug.';
  end if;
end;
$$;
