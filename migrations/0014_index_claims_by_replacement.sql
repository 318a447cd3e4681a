-- 0014_index_claims_by_replacement.sql: pruning is linear again (issue 16).
-- engine.task_claims.replaced_by references engine.task_claims (claim_id); deleting a claim
-- (pruning a run cascades to its claims) checks that no claim is replaced by it, and without an
-- index on replaced_by each check scanned the whole table: pruning 100 000 runs took minutes.
-- The growth benchmark found it (docs/performance.md).
create index claims_by_replacement on engine.task_claims (replaced_by) where replaced_by is not null;
