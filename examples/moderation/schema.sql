-- The moderation application's own schema: threads to review and the reviews with their
-- domain states. A review moves submitted -> fetched -> classified -> decided, each move a
-- guarded transition, so a handler that runs twice (a retry, a recovered crash) never moves
-- it twice or backwards.
create schema moderation;

create table moderation.threads (
  thread_id bigint not null,
  forum text not null,
  title text not null,
  body text not null,
  author text not null,
  constraint threads_are_identified_by_thread_id primary key (thread_id)
);

create table moderation.reviews (
  review_id bigint generated always as identity,
  thread_id bigint not null,
  run_id uuid,
  status text not null default 'submitted',
  fetch_attempts integer not null default 0,
  label text,
  score numeric,
  verdict text,
  submitted_at timestamptz not null default clock_timestamp(),
  fetched_at timestamptz,
  classified_at timestamptz,
  decided_at timestamptz,
  constraint reviews_are_identified_by_review_id primary key (review_id),
  constraint review_is_of_a_thread foreign key (thread_id) references moderation.threads (thread_id),
  constraint review_has_one_run unique (run_id),
  constraint review_status_is_known check (status in ('submitted', 'fetched', 'classified', 'decided')),
  constraint verdict_is_publish_hold_or_remove check (verdict in ('publish', 'hold', 'remove')),
  constraint decided_review_has_a_verdict check ((status = 'decided') = (verdict is not null))
);
