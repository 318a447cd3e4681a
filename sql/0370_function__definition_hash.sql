-- _definition_hash: the identity of a flow's live definition (options, mode, every step with
-- its position, options, route and dependencies). A v2 run records it at start; claims and
-- reconciliation refuse (DR005) when the live definition no longer matches. The value is
-- cached in engine.flows.definition_hash by triggers (_refresh_definition_hash).
create function engine._definition_hash(flow_slug text)
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select pg_catalog.md5(pg_catalog.jsonb_build_array(
    (select pg_catalog.jsonb_build_array(f.flow_slug, f.max_attempts, f.base_delay, f.timeout,
                                         f.queue_mode)
       from engine.flows as f where f.flow_slug = _definition_hash.flow_slug),
    (select coalesce(pg_catalog.jsonb_agg(pg_catalog.jsonb_build_array(
              s.step_slug, s.step_index, s.max_attempts, s.base_delay, s.timeout, s.start_delay,
              s.queue_name,
              (select coalesce(pg_catalog.jsonb_agg(d.dep_slug order by d.dep_slug), '[]'::jsonb)
                 from engine.deps as d
                where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug))
              order by s.step_index), '[]'::jsonb)
       from engine.steps as s where s.flow_slug = _definition_hash.flow_slug)
  )::text);
$$;
