-- _is_valid_slug: the slug rule shared by flows and steps (spelling kept as given).
create function engine._is_valid_slug(slug text)
returns boolean
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
  select slug is not null
     and slug operator(pg_catalog.~) '^[A-Za-z_][A-Za-z0-9_]*$'
     and pg_catalog.length(slug) <= 128;
$$;
