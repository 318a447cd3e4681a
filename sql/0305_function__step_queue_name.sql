-- _step_queue_name: the private queue of a step in a step-queued flow.
-- lower(flow) || '__' || lower(step) when that has at most 47 characters (PGMQ's limit);
-- otherwise the flow name cut to fit before the suffix '__' || step_index.
create function engine._step_queue_name(flow_slug text, step_slug text, step_index integer)
returns text
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
  select case
    when pg_catalog.length(pg_catalog.lower(flow_slug) || '__' || pg_catalog.lower(step_slug)) <= 47
      then pg_catalog.lower(flow_slug) || '__' || pg_catalog.lower(step_slug)
    else pg_catalog.left(pg_catalog.lower(flow_slug),
                         47 - pg_catalog.length('__' || step_index::text)) || '__' || step_index::text
  end;
$$;
