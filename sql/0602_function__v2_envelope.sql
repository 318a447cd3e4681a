-- _v2_envelope: v2_limits() as the typed row engine.v2_envelope (what engine code reads).
create function engine._v2_envelope()
returns engine.v2_envelope
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
  select l.* from pg_catalog.jsonb_populate_record(null::engine.v2_envelope, engine.v2_limits()) as l;
$$;
