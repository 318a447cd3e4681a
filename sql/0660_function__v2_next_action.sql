-- _v2_next_action: the next immediate orchestration action of a v2 run, derived from
-- authoritative rows only (step states, tasks, the run), never from replayed counters:
--   'dispatch_b'  A is completed and B's step state is still created: start B's step state,
--               send B's message to B's stored route with B's start_delay, and create B's
--               task (queued) with that pair as its snapshot, as one action;
--   'complete'  B is completed and the run is still started: complete the run;
--   null        nothing to do now (A or B still working, or the run is terminal).
-- Reads only; the caller holds the run, work and step state locks.
create function engine._v2_next_action(run_id uuid)
returns text
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select case
    when r.status <> 'started' then null
    when b.status = 'created' and a.status = 'completed' then 'dispatch_b'
    when b.status = 'completed' then 'complete'
  end
  from engine.runs as r
  join engine.steps as sa on sa.flow_slug = r.flow_slug and sa.deps_count = 0
  join engine.steps as sb on sb.flow_slug = r.flow_slug and sb.deps_count > 0
  join engine.step_states as a on a.run_id = r.run_id and a.step_slug = sa.step_slug
  join engine.step_states as b on b.run_id = r.run_id and b.step_slug = sb.step_slug
  where r.run_id = _v2_next_action.run_id;
$$;
