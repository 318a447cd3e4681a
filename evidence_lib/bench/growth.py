"""Does a v2 run cost more when history grows? v2 runs/s and server CPU per run (the plain
client, one connection) with 0, 10 000 and 100 000 completed runs already in the tables, and
again after pruning them.

The history is written directly with `generate_series` (a benchmark preload, not engine
behaviour): completed v2 runs of the measured flow with their step states, tasks, work rows,
settled claims and settlements, an hour old, their message ids outside every queue (their
archived messages are not written: PGMQ's own tables are left to PGMQ). Writing them through
the engine would take minutes per 10 000 runs.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from evidence_lib.bench.plain import COUNT_SQL, prepare
from evidence_lib.bench.throughput import measure
from evidence_lib.pg import db, migrate
from evidence_lib.pg.db import Conn, Server, connect, one

PRELOAD = """
with runs as (
  insert into engine.runs (run_id, flow_slug, status, input, output, remaining_steps, started_at,
                           completed_at, protocol, definition_hash)
  select gen_random_uuid(), 'p0', 'completed', '{}', '{}', 0, now() - interval '1 hour',
         now() - interval '1 hour', 'v2', (select definition_hash from engine.flows where flow_slug = 'p0')
    from generate_series(1, %(n)s)
  returning run_id
), work as (
  insert into engine.run_work (run_id, requested_generation, processed_generation)
  select run_id, 2, 2 from runs returning run_id
), steps as (
  insert into engine.step_states (run_id, step_slug, flow_slug, status, remaining_deps, created_at,
                                  started_at, completed_at)
  select w.run_id, s.step_slug, 'p0', 'completed', 0, now() - interval '1 hour', now() - interval '1 hour',
         now() - interval '1 hour'
    from work as w cross join (values ('A'), ('B')) as s (step_slug)
  returning run_id, step_slug
), tasks as (
  insert into engine.step_tasks (run_id, step_slug, flow_slug, task_index, status, attempts_count,
                                 message_id, output, queued_at, started_at, completed_at, queue_name)
  select run_id, step_slug, 'p0', 0, 'completed', 1, -nextval('pg_temp.history_ids'), '{}',
         now() - interval '1 hour', now() - interval '1 hour', now() - interval '1 hour', 'p0'
    from steps
  returning run_id, step_slug, message_id
), claims as (
  insert into engine.task_claims (claim_id, run_id, step_slug, task_index, attempt, queue_name, message_id,
                                  claimed_at, lease_expires_at, timeout, max_attempts, start_delay, state)
  select gen_random_uuid(), run_id, step_slug, 0, 1, 'p0', message_id, now() - interval '1 hour',
         now() - interval '59 minutes', 60, 1, 0, 'settled'
    from tasks
  returning claim_id, run_id
)
insert into engine.task_settlements (claim_id, run_id, outcome, result, settled_at, requested_generation)
select claim_id, run_id, 'completed', '{}', now() - interval '1 hour', 1 from claims
"""


def preload(conn: Conn, n: int) -> None:
    """Add `n` completed v2 runs of flow p0, an hour old (see the module docstring)."""
    if n <= 0:
        return
    conn.execute("create temp sequence if not exists history_ids start 1000000000")
    with conn.transaction():
        conn.execute(PRELOAD.encode(), {"n": n})
    conn.execute(
        "analyze engine.runs, engine.step_states, engine.step_tasks, engine.task_claims, "
        "engine.task_settlements, engine.run_work"
    )


def growth(
    server: Server,
    *,
    points: tuple[int, ...] = (0, 10_000, 100_000),
    repetitions: int = 2,
    seconds: float = 2.0,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """v2 runs/s and server CPU per run at each history size, then after pruning."""
    rows: list[dict[str, Any]] = []
    with db.scratch_database(server, prefix="bench_growth") as url:
        migrate.apply_migrations(url)
        with connect(url) as conn:
            prepare(conn, "v2", 1)
            done = 0
            for point in [*points, -1]:
                if point == -1:
                    pruned = one(conn, "select engine.prune_data_older_than(interval '30 minutes')")
                    label = f"after pruning {pruned} runs"
                else:
                    if progress:
                        progress(f"growth: loading history up to {point} completed runs")
                    preload(conn, point - done)
                    done = point
                    label = f"{point} completed runs"
                history = int(one(conn, "select count(*) from engine.runs where status = 'completed'"))
                samples = [
                    measure(server, url, [("plain", {"system": "v2", "index": 0})], COUNT_SQL["v2"], 0.5, seconds)
                    for _ in range(repetitions)
                ]
                rates = [s["units"] / s["seconds"] for s in samples]
                cpu = [s["server_cpu"] * 1000 / s["units"] for s in samples if s["server_cpu"] and s["units"]]
                rows.append(
                    {
                        "history": label,
                        "completed_runs_in_tables": history,
                        "v2_runs_per_s": round(statistics.median(rates), 1),
                        "server_cpu_ms_per_run": round(statistics.median(cpu), 2) if cpu else None,
                    }
                )
                if progress:
                    progress(f"growth: {label}: {rows[-1]['v2_runs_per_s']} runs/s")
    return rows
