-- v2_limits: the frozen v2 envelope as one jsonb object. Code reads limits from here, never
-- from scattered literals.
create function engine.v2_limits()
returns jsonb
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
  select '{
    "steps": 2,
    "task_index": 0,
    "max_attempts": 1,
    "when_exhausted": "fail",
    "timeout_min_seconds": 1,
    "timeout_max_seconds": 900,
    "start_delay_a_seconds": 0,
    "start_delay_b_min_seconds": 0,
    "start_delay_b_max_seconds": 3600,
    "input_max_bytes": 65536,
    "result_max_bytes": 262144,
    "message_ids_per_call": 1,
    "takeovers_per_task": 1,
    "lease_grace_seconds": 2,
    "reconcile_actions_default": 8,
    "reconcile_actions_min": 1,
    "reconcile_actions_max": 64,
    "errors_before_attention": 3,
    "backoff_base_seconds": 1,
    "backoff_cap_seconds": 60,
    "worker_settlement_attempts": 3
  }'::jsonb;
$$;
