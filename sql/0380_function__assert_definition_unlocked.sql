-- _assert_definition_unlocked: refuse a change to a flow while any of its v2 runs is not
-- terminal. The caller holds the flow row for update, so no v2 run can start meanwhile
-- (v2_start_run holds it for share).
-- Refuses: DR011 naming the flow and how many v2 runs are active.
create function engine._assert_definition_unlocked(flow_slug text, change text)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_active bigint;
begin
  select pg_catalog.count(*) into v_active
    from engine.runs as r
   where r.flow_slug = _assert_definition_unlocked.flow_slug
     and r.protocol = 'v2' and r.status = 'started';
  if v_active > 0 then
    raise exception 'flow % cannot change (%): % v2 run(s) are not terminal',
      _assert_definition_unlocked.flow_slug, _assert_definition_unlocked.change, v_active
      using errcode = 'DR011',
            hint = 'Let the v2 runs of this flow finish first.';
  end if;
end;
$$;
