-- _refresh_definition_hash: trigger function on flows, steps and deps. Recomputes the cached
-- definition hash of every flow a changed row belongs to, in the same transaction, so that
-- claims and reconciliation compare against the live definition without recomputing it.
create function engine._refresh_definition_hash()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if tg_op in ('INSERT', 'UPDATE') then
    update engine.flows as f
       set definition_hash = engine._definition_hash(f.flow_slug)
     where f.flow_slug = new.flow_slug;
  end if;
  if tg_op = 'DELETE' or (tg_op = 'UPDATE' and old.flow_slug is distinct from new.flow_slug) then
    update engine.flows as f
       set definition_hash = engine._definition_hash(f.flow_slug)
     where f.flow_slug = old.flow_slug;
  end if;
  return null;
end;
$$;
