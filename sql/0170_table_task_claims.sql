-- task_claims: the ownership history of v2 tasks. A claim owns one physical message pair until
-- it is settled or revoked by a takeover; rows are never rewritten except their state. At most
-- one current claim per task. attempt numbers the claims of a task (1, 2 after a takeover).
create table engine.task_claims (
  claim_id uuid not null,
  run_id uuid not null,
  step_slug text not null,
  task_index integer not null,
  attempt integer not null,
  queue_name text not null,
  message_id bigint not null,
  claimed_at timestamptz not null,
  lease_expires_at timestamptz not null,
  timeout integer not null,
  max_attempts integer not null,
  start_delay integer not null,
  state text not null default 'current',
  revoked_at timestamptz,
  replaced_by uuid,
  constraint task_claims_are_identified_by_claim_id primary key (claim_id),
  constraint claim_belongs_to_a_task foreign key (run_id, step_slug, task_index)
    references engine.step_tasks (run_id, step_slug, task_index) on delete cascade,
  constraint claim_is_replaced_by_a_claim
    foreign key (replaced_by) references engine.task_claims (claim_id)
    deferrable initially deferred,
  constraint claim_state_is_current_settled_or_revoked
    check (state in ('current', 'settled', 'revoked')),
  constraint revoked_claim_has_revoked_at check ((state = 'revoked') = (revoked_at is not null)),
  constraint only_a_revoked_claim_is_replaced check (replaced_by is null or state = 'revoked'),
  constraint lease_ends_after_the_claim check (lease_expires_at > claimed_at),
  constraint claim_attempt_is_positive check (attempt >= 1)
);
create unique index one_current_claim_per_task on engine.task_claims (run_id, step_slug, task_index)
  where state = 'current';
create index claims_by_task on engine.task_claims (run_id, step_slug, task_index);
-- the self-reference replaced_by is checked on every delete of a claim (pruning): without this
-- index each deleted claim scans the whole table (found by the growth benchmark, 0014)
create index claims_by_replacement on engine.task_claims (replaced_by) where replaced_by is not null;
