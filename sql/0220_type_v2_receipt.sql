-- v2_receipt: the answer to a settlement: accepted, replayed, conflict, stale or terminal.
create type engine.v2_receipt as (
  verdict text,
  claim_id uuid,
  outcome text,
  result jsonb,
  generation bigint,
  settled_at timestamptz
);
