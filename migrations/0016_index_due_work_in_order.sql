-- 0016_index_due_work_in_order.sql: v2_reconcile_next reads the due runs in its order (issue 26).
-- It takes the first due run it can lock (next_attempt_at nulls first, run_id, SKIP LOCKED); with
-- only the partial index on run_id every call read and sorted every dirty run, so reconcilers got
-- slower as they fell behind. Measured on 2 cores, a pool of 4 workers and 2 reconcilers: 159
-- runs/s without, 192 with (medians of 3).
create index due_work_in_order on engine.run_work (next_attempt_at nulls first, run_id)
  where requested_generation > processed_generation;
