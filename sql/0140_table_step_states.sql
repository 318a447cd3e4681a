-- step_states: one row per step of a run.
create table engine.step_states (
  run_id uuid not null,
  step_slug text not null,
  flow_slug text not null,
  status text not null default 'created',
  remaining_deps integer not null,
  created_at timestamptz not null default clock_timestamp(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  error_message text,
  constraint step_states_are_identified_by_run_and_step primary key (run_id, step_slug),
  constraint step_state_belongs_to_a_run
    foreign key (run_id) references engine.runs (run_id) on delete cascade,
  constraint step_state_belongs_to_a_step
    foreign key (flow_slug, step_slug) references engine.steps (flow_slug, step_slug),
  constraint step_state_status_is_known
    check (status in ('created', 'started', 'completed', 'failed', 'cancelled')),
  constraint remaining_deps_is_not_negative check (remaining_deps >= 0)
);
