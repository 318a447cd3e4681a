-- _v1_report_run: the preamble of the v1 reports (complete_task, fail_task). Refuses before
-- taking any lock, then locks the run.
-- Locks: run (for update).
-- Refuses: DR014 unknown run · DR010 a v2 run (a v1 writer never writes v2 state).
create function engine._v1_report_run(run_id uuid, writer text)
returns engine.runs
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare
  v_run engine.runs;
begin
  select r.* into v_run from engine.runs as r where r.run_id = _v1_report_run.run_id;
  if not found then
    raise exception 'unknown run %', _v1_report_run.run_id using errcode = 'DR014';
  end if;
  if v_run.protocol <> 'v1' then
    raise exception 'run % is a % run: % is a v1 writer and refuses it', _v1_report_run.run_id,
      v_run.protocol, _v1_report_run.writer
      using errcode = 'DR010', hint = 'A v2 task is settled with engine.v2_settle(claim_id, ...).';
  end if;
  select r.* into strict v_run from engine.runs as r where r.run_id = _v1_report_run.run_id for update;
  return v_run;
end;
$$;
