-- steps: the steps of a flow in add_step order; null options inherit the flow's.
-- queue_name is the step's persisted route: lower(flow_slug) in a plain flow, its private
-- queue in a step-queued flow. Dispatch uses it; later message operations use task snapshots.
create table engine.steps (
  flow_slug text not null,
  step_slug text not null,
  step_index integer not null,
  deps_count integer not null default 0,
  max_attempts integer,
  base_delay integer,
  timeout integer,
  start_delay integer,
  created_at timestamptz not null default clock_timestamp(),
  queue_name text not null,
  constraint steps_are_identified_by_flow_and_slug primary key (flow_slug, step_slug),
  constraint step_index_is_unique_within_its_flow unique (flow_slug, step_index),
  constraint step_belongs_to_a_flow foreign key (flow_slug) references engine.flows (flow_slug),
  constraint step_slug_is_a_valid_slug
    check (step_slug ~ '^[A-Za-z_][A-Za-z0-9_]*$' and length(step_slug) <= 128),
  constraint step_slug_run_is_reserved_for_the_run_input check (step_slug <> 'run'),
  constraint step_index_is_not_negative check (step_index >= 0),
  constraint deps_count_is_not_negative check (deps_count >= 0),
  constraint step_max_attempts_is_at_least_one check (max_attempts >= 1),
  constraint step_base_delay_is_not_negative check (base_delay >= 0),
  constraint step_timeout_is_at_least_one_second check (timeout >= 1),
  constraint step_start_delay_is_not_negative check (start_delay >= 0),
  constraint step_route_is_a_lower_case_pgmq_name
    check (queue_name ~ '^[a-z_][a-z0-9_]*$' and length(queue_name) <= 47)
);
create index steps_by_route on engine.steps (queue_name);
