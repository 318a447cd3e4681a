-- task_settlements: one row per accepted settlement of a claim, the receipt every replay
-- returns. requested_generation is the work generation this settlement requested.
create table engine.task_settlements (
  claim_id uuid not null,
  run_id uuid not null,
  outcome text not null,
  result jsonb not null,
  settled_at timestamptz not null,
  requested_generation bigint not null,
  constraint settlements_are_identified_by_claim primary key (claim_id),
  constraint settlement_settles_a_claim
    foreign key (claim_id) references engine.task_claims (claim_id) on delete cascade,
  constraint settlement_belongs_to_a_run
    foreign key (run_id) references engine.runs (run_id) on delete cascade,
  constraint settlement_outcome_is_completed_or_failed check (outcome in ('completed', 'failed'))
);
create index settlements_by_run on engine.task_settlements (run_id);
