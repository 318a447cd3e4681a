-- v2_grant: a won claim: the claim id that fences every later report, the task, its owned
-- message pair, the handler input and the lease horizon.
create type engine.v2_grant as (
  claim_id uuid,
  run_id uuid,
  step_slug text,
  task_index integer,
  queue_name text,
  message_id bigint,
  input jsonb,
  lease_expires_at timestamptz
);
