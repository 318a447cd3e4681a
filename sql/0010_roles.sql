-- Roles without login: engine_worker runs handlers, engine_operator runs everything else.
-- Roles are cluster-wide, so they are created only when missing; grants are per database.
do $$
begin
  if not exists (select from pg_catalog.pg_roles where rolname = 'engine_worker') then
    create role engine_worker nologin;
  end if;
  if not exists (select from pg_catalog.pg_roles where rolname = 'engine_operator') then
    create role engine_operator nologin;
  end if;
end;
$$;
grant usage on schema engine to engine_worker, engine_operator;
