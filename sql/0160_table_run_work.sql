-- run_work: the stable orchestration work row of a v2 run, created with the run and kept for
-- its lifetime. The run is dirty while requested_generation > processed_generation; only a
-- reconcile that finds no immediate action left under its locks marks a generation processed.
create table engine.run_work (
  run_id uuid not null,
  requested_generation bigint not null default 0,
  processed_generation bigint not null default 0,
  health text not null default 'clean',
  consecutive_errors integer not null default 0,
  next_attempt_at timestamptz,
  attention_reason text,
  constraint run_work_is_identified_by_its_run primary key (run_id),
  constraint run_work_belongs_to_a_run
    foreign key (run_id) references engine.runs (run_id) on delete cascade,
  constraint generations_are_not_negative
    check (requested_generation >= 0 and processed_generation >= 0),
  constraint processed_generation_never_exceeds_requested
    check (processed_generation <= requested_generation),
  constraint health_is_clean_backoff_or_attention check (health in ('clean', 'backoff', 'attention')),
  constraint consecutive_errors_is_not_negative check (consecutive_errors >= 0),
  constraint backoff_has_a_next_attempt_time check (health <> 'backoff' or next_attempt_at is not null),
  constraint attention_has_a_reason check ((health = 'attention') = (attention_reason is not null))
);
create index dirty_or_unhealthy_work on engine.run_work (run_id)
  where requested_generation > processed_generation or health <> 'clean';
-- v2_reconcile_next walks the due runs in its order and takes the first it can lock (SKIP LOCKED):
-- in this index's order it stops there instead of sorting every dirty run on every call.
create index due_work_in_order on engine.run_work (next_attempt_at nulls first, run_id)
  where requested_generation > processed_generation;
