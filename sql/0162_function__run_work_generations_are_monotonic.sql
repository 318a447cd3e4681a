-- _run_work_generations_are_monotonic: trigger function. Neither generation may decrease and
-- processed may never pass requested; an increment past the bigint range already fails in the
-- arithmetic (22003), so generations never wrap.
create function engine._run_work_generations_are_monotonic()
returns trigger
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if new.requested_generation < old.requested_generation
     or new.processed_generation < old.processed_generation then
    raise exception 'run %: generations may not decrease (requested % -> %, processed % -> %)',
      old.run_id, old.requested_generation, new.requested_generation,
      old.processed_generation, new.processed_generation
      using errcode = '23514';
  end if;
  if new.processed_generation > new.requested_generation then
    raise exception 'run %: processed generation % would exceed requested generation %',
      old.run_id, new.processed_generation, new.requested_generation
      using errcode = '23514';
  end if;
  return new;
end;
$$;
