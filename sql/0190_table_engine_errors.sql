-- engine_errors: durable record of every reconcile action that failed and was rolled back.
create table engine.engine_errors (
  error_id bigint generated always as identity,
  run_id uuid not null,
  generation bigint not null,
  action text not null,
  sqlstate text not null,
  message text not null,
  context text,
  occurred_at timestamptz not null,
  constraint engine_errors_are_identified_by_error_id primary key (error_id),
  constraint engine_error_belongs_to_a_run
    foreign key (run_id) references engine.runs (run_id) on delete cascade
);
create index engine_errors_by_run on engine.engine_errors (run_id, occurred_at);
