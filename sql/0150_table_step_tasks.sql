-- step_tasks: the single task of a started step, and its message. (queue_name, message_id)
-- snapshots the physical message when it is sent; runtime code never rewrites it.
create table engine.step_tasks (
  run_id uuid not null,
  step_slug text not null,
  flow_slug text not null,
  task_index integer not null default 0,
  status text not null default 'queued',
  attempts_count integer not null default 0,
  message_id bigint,
  output jsonb,
  error_message text,
  queued_at timestamptz not null default clock_timestamp(),
  started_at timestamptz,
  completed_at timestamptz,
  failed_at timestamptz,
  queue_name text,
  infrastructure_losses integer not null default 0,
  constraint step_tasks_are_identified_by_run_step_and_index
    primary key (run_id, step_slug, task_index),
  constraint step_task_belongs_to_a_step_state
    foreign key (run_id, step_slug) references engine.step_states (run_id, step_slug)
    on delete cascade,
  constraint step_task_status_is_known
    check (status in ('queued', 'started', 'completed', 'failed', 'cancelled')),
  constraint task_index_is_zero_for_single_task_steps check (task_index = 0),
  constraint attempts_count_is_not_negative check (attempts_count >= 0),
  constraint infrastructure_losses_is_not_negative check (infrastructure_losses >= 0),
  constraint message_identity_is_complete_or_absent
    check ((queue_name is null) = (message_id is null))
);
create unique index one_task_per_physical_message on engine.step_tasks (queue_name, message_id)
  where message_id is not null;
create index started_step_tasks on engine.step_tasks (started_at) where status = 'started';
