-- v2_report: what one reconcile call did.
create type engine.v2_report as (
  run_id uuid,
  generation bigint,
  actions integer,
  processed boolean,
  health text,
  run_status text
);
