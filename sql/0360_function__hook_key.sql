-- _hook_key: the advisory lock key of a hook point: (7001, hashtext(point) & 0x7fffffff).
create function engine._hook_key(point text)
returns integer
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
  select pg_catalog.hashtext(point) operator(pg_catalog.&) 2147483647;
$$;
