-- runs: one row per started flow run. protocol says which engine drives it: 'v1' (the cascade)
-- or 'v2' (Dirty Runs: fenced claims, settlements, reconciliation); definition_hash is the flow
-- definition identity a v2 run was started with.
create table engine.runs (
  run_id uuid not null default gen_random_uuid(),
  flow_slug text not null,
  status text not null default 'started',
  input jsonb not null,
  output jsonb,
  remaining_steps integer not null,
  started_at timestamptz not null default clock_timestamp(),
  completed_at timestamptz,
  failed_at timestamptz,
  protocol text not null default 'v1',
  definition_hash text,
  constraint runs_are_identified_by_run_id primary key (run_id),
  constraint run_belongs_to_a_flow foreign key (flow_slug) references engine.flows (flow_slug),
  constraint run_status_is_known check (status in ('started', 'completed', 'failed')),
  constraint remaining_steps_is_not_negative check (remaining_steps >= 0),
  constraint completed_run_has_completed_at check ((status = 'completed') = (completed_at is not null)),
  constraint failed_run_has_failed_at check ((status = 'failed') = (failed_at is not null)),
  constraint run_protocol_is_v1_or_v2 check (protocol in ('v1', 'v2')),
  constraint v2_run_records_its_definition_hash
    check ((protocol = 'v2') = (definition_hash is not null))
);
create index active_v2_runs_by_flow on engine.runs (flow_slug)
  where protocol = 'v2' and status = 'started';
create index runs_by_flow on engine.runs (flow_slug);
create index terminal_runs_by_age on engine.runs (coalesce(completed_at, failed_at))
  where status in ('completed', 'failed');
