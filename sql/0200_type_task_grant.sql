-- task_grant: what start_tasks hands to a v1 worker for each task it won.
create type engine.task_grant as (
  run_id uuid,
  step_slug text,
  task_index integer,
  queue_name text,
  message_id bigint,
  input jsonb
);
