-- v2_envelope: the frozen v2 envelope as a typed row, one field per key of v2_limits(). Engine
-- code reads limits as fields of this type (v_limits.lease_grace_seconds), so a misspelt name
-- fails loudly (42703 record has no field) instead of reading as null; the migration and a
-- test prove the fields and the keys of v2_limits() are the same set.
create type engine.v2_envelope as (
  steps integer,
  task_index integer,
  max_attempts integer,
  when_exhausted text,
  timeout_min_seconds integer,
  timeout_max_seconds integer,
  start_delay_a_seconds integer,
  start_delay_b_min_seconds integer,
  start_delay_b_max_seconds integer,
  input_max_bytes integer,
  result_max_bytes integer,
  message_ids_per_call integer,
  takeovers_per_task integer,
  lease_grace_seconds integer,
  reconcile_actions_default integer,
  reconcile_actions_min integer,
  reconcile_actions_max integer,
  errors_before_attention integer,
  backoff_base_seconds integer,
  backoff_cap_seconds integer,
  worker_settlement_attempts integer
);
