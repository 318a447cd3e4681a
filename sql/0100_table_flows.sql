-- flows: one row per flow definition; its options are the defaults of its steps.
-- Every flow reserves its default queue name lower(flow_slug), whatever its queue_mode.
-- definition_hash caches engine._definition_hash(flow_slug); triggers on flows, steps and deps
-- keep it current in the same transaction as any change, direct writes included.
create table engine.flows (
  flow_slug text not null,
  max_attempts integer not null default 3,
  base_delay integer not null default 1,
  timeout integer not null default 60,
  created_at timestamptz not null default clock_timestamp(),
  queue_mode text not null default 'flow',
  definition_hash text,
  constraint flows_are_identified_by_slug primary key (flow_slug),
  constraint flow_slug_is_a_valid_slug
    check (flow_slug ~ '^[A-Za-z_][A-Za-z0-9_]*$' and length(flow_slug) <= 128),
  constraint flow_queue_name_fits_in_47_characters check (length(flow_slug) <= 47),
  constraint flow_max_attempts_is_at_least_one check (max_attempts >= 1),
  constraint flow_base_delay_is_not_negative check (base_delay >= 0),
  constraint flow_timeout_is_at_least_one_second check (timeout >= 1),
  constraint flow_queue_mode_is_flow_or_step check (queue_mode in ('flow', 'step'))
);
create unique index flow_default_queue_names_are_unique on engine.flows (lower(flow_slug));
