"""Worker pools side by side on one server: this engine's v2 pool (workers + reconciler, with
wake-ups, and the same pool polling), our v1 pool, and a pool speaking the released anchor's
protocol (`bench.anchor_pool`), each driven by a producer in its own process.

- `pool_runs`: throughput with a producer keeping a backlog (the pool's peak);
- `lone_latencies`: end to end A -> B latency of one run at a time through an idle pool;
- `paced_latencies`: the same under a producer starting runs at a fixed rate (half of peak);
- `idle_cost`: what an idle pool with its reconciler sends to the server per second.
Latencies are the server's own timestamps (`completed_at - started_at` of each run), read back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from evidence_lib.bench.participants import Spec, run_case
from evidence_lib.bench.throughput import BACKLOG_PER_WORKER, Throughput, _result, measure
from evidence_lib.engine import v1, v2
from evidence_lib.engine.flows import compile_flow
from evidence_lib.harness.ab_flow import ab_flow
from evidence_lib.pg.db import Server, connect, one

System = Literal["anchor", "v1", "v2", "v2 polling"]
SYSTEMS: tuple[System, ...] = ("anchor", "v1", "v2", "v2 polling")
SLUG = "pool_ab"
BACKSTOP_POLL = 1.0  # seconds between two looks of the backstop reconciler beside a v2 pool
LABELS: dict[System, str] = {
    "anchor": "anchor pool A -> B runs",
    "v1": "v1 A -> B runs",
    "v2": "v2 A -> B runs (wake-ups)",
    "v2 polling": "v2 A -> B runs (polling, no notifications)",
}


def runs_table(system: System) -> str:
    return "pgflow.runs" if system == "anchor" else "engine.runs"


def prepare(url: str, system: System) -> None:
    """The A -> B flow of `system` on `url` (the anchor's schema must be installed for "anchor")."""
    with connect(url) as conn:
        if system == "anchor":
            from evidence_lib.bench import anchor_pool

            anchor_pool.prepare(conn, SLUG)
        else:
            compile_flow(conn, ab_flow(SLUG, "flow"))


def specs(system: System, workers: int, producer: dict[str, Any]) -> list[Spec]:
    """The participants: a producer (`producer` options: `in_flight` or `rate`), the workers and,
    for v2, one reconciler (each v2 worker reconciles its own settlements first)."""
    if system == "anchor":
        out: list[Spec] = [("anchor_producer", {"slug": SLUG, **producer})]
        return out + [("anchor_worker", {"slug": SLUG, "name": f"pool_anchor_{i}"}) for i in range(workers)]
    protocol = "v1" if system == "v1" else "v2"
    wakeups = system == "v2"
    out = [("producer", {"slug": SLUG, "protocol": protocol, **producer})]
    # a v2 worker reconciles what it settled itself (its follow-up reconciler, issue 33); one
    # reconciler beside the pool is the backstop for what a follow-up missed: it polls every
    # BACKSTOP_POLL s and registers for no wake-up, so it never races the follow-ups for a run
    # they are about to reconcile (each such race costs a second v2_reconcile of the run)
    out += [("worker", {"slug": SLUG, "mode": "flow", "protocol": protocol, "name": f"pool_{protocol}_{i}",
                        "wakeups": wakeups, "followup": protocol == "v2"}) for i in range(workers)]  # fmt: skip
    if protocol == "v2":
        out += [("reconciler", {"name": "pool_reconciler_0", "wakeups": False, "poll_interval": BACKSTOP_POLL})]
    return out


def _completed(system: System) -> str:
    return f"select count(*) from {runs_table(system)} where flow_slug = '{SLUG}' and status = 'completed'"


def pool_runs(server: Server, url: str, system: System, workers: int, seconds: float,
              warmup: float = 1.0) -> Throughput:  # fmt: skip
    """Peak throughput: the producer keeps `BACKLOG_PER_WORKER` runs per worker started."""
    prepare(url, system)
    pool = specs(system, workers, {"in_flight": BACKLOG_PER_WORKER * workers})
    out = measure(server, url, pool, _completed(system), warmup, seconds)
    return _result(LABELS[system], workers, "runs", pool, out)


def _latencies(url: str, system: System, since: Any, until: Any = None) -> list[float]:
    """Milliseconds from start to completion of every run started in [`since`, `until`] (server
    clock); a run not completed counts as infinitely slow (it stays in the percentiles)."""
    with connect(url) as conn:
        found = conn.execute(
            f"select extract(epoch from completed_at - started_at) * 1000 from {runs_table(system)} "
            "where flow_slug = %s and started_at >= %s and (%s::timestamptz is null or started_at <= %s)",
            (SLUG, since, until, until),
        ).fetchall()
    return [float("inf") if ms is None else float(ms) for (ms,) in found]


def _start(conn: Any, system: System) -> None:
    if system == "anchor":
        conn.execute("select run_id from pgflow.start_flow(%s, '{}'::jsonb)", (SLUG,))
    elif system == "v1":
        v1.start_flow(conn, SLUG, {"n": 1})
    else:
        v2.start_run(conn, SLUG, {"n": 1})


def lone_latencies(url: str, system: System, runs: int, workers: int = 1, deadline: float = 5.0) -> list[float]:
    """`runs` runs one at a time through an idle pool: each is started once the previous one
    completed (a wait of at most `deadline` s each, read from the database)."""
    prepare(url, system)
    pool = specs(system, workers, {"rate": 0})  # a producer that starts nothing
    done = (
        f"select status = 'completed' from {runs_table(system)} where flow_slug = %s order by started_at desc limit 1"
    )
    with run_case(url, pool) as (_, finish), connect(url, application_name="perf_lone") as conn:
        time.sleep(1.0)  # warm-up: the pool connected and idle (not an ordering)
        since = one(conn, "select clock_timestamp()")
        for _ in range(runs):
            _start(conn, system)
            until = time.monotonic() + deadline
            while not one(conn, done, (SLUG,)) and time.monotonic() < until:
                time.sleep(0.002)  # the run's own timestamps are the measurement; this only paces
        finish()
    return _latencies(url, system, since)


def paced_latencies(url: str, system: System, workers: int, rate: float, seconds: float,
                    drain: float = 5.0) -> list[float]:  # fmt: skip
    """Runs started at `rate` per second for `seconds`; then at most `drain` s, with the pool still
    running (and the producer still starting runs, which are not counted), for the last of them."""
    prepare(url, system)
    pool = specs(system, workers, {"rate": rate})
    with run_case(url, pool) as (_, finish), connect(url, application_name="perf_paced") as conn:
        time.sleep(1.0)  # warm-up (not an ordering)
        since = one(conn, "select clock_timestamp()")
        time.sleep(seconds)  # the measuring window
        until = one(conn, "select clock_timestamp()")
        left = (f"select count(*) from {runs_table(system)} where flow_slug = %s and status = 'started' "
                "and started_at <= %s")  # fmt: skip
        stop_at = time.monotonic() + drain
        while one(conn, left, (SLUG, until)) and time.monotonic() < stop_at:
            time.sleep(0.05)  # the runs of the window may still be running: read the database again
        finish()
    return _latencies(url, system, since, until)


@dataclass
class IdleCost:
    seconds: float
    client_calls: int  # every SQL round trip the pool's processes sent in the window
    server_transactions: int  # pg_stat_database: commits + rollbacks of the database in the window

    @property
    def client_per_second(self) -> float:
        return self.client_calls / self.seconds

    @property
    def server_per_second(self) -> float:
        return self.server_transactions / self.seconds


# an idle backend reports its transactions to the cumulative statistics up to 10 s late
# (PGSTAT_IDLE_INTERVAL); one that exits reports them at once. The window opens once every
# process's start-up transactions were reported and closes once every process has exited.
IDLE_WARMUP = 11.0
XACTS = "select xact_commit + xact_rollback from pg_catalog.pg_stat_database where datname = current_database()"


def idle_cost(url: str, system: System, workers: int, seconds: float) -> IdleCost:
    """An idle pool (nothing started) and its reconciler for `seconds`: the round trips its
    processes sent (counted by each client) and the transactions the server counted (its
    processes stopped at the end of the window, so their last transactions are reported too)."""
    prepare(url, system)
    pool = specs(system, workers, {"rate": 0})
    with run_case(url, pool) as (handle, finish), connect(url, application_name="perf_idle") as conn:
        time.sleep(IDLE_WARMUP)  # every waiter registered, its start-up reported (not an ordering)
        handle.reset.set()
        conn.execute("select pg_catalog.pg_stat_clear_snapshot()")
        x0, t0 = int(one(conn, XACTS)), time.perf_counter()
        time.sleep(seconds)  # the measuring window
        calls, _ = finish()
        t1 = time.perf_counter()
        conn.execute("select pg_catalog.pg_stat_clear_snapshot()")
        x1 = int(one(conn, XACTS))
    ours = 2  # this session's own reads of the counter inside the window
    return IdleCost(t1 - t0, sum(len(v) for v in calls.samples.values()), max(0, x1 - x0 - ours))


START_BATCH = 64  # starts per pipeline: each its own transaction, one round trip for all of them
LOOK_EVERY = 0.02  # seconds between two counts of the runs in flight while the backlog is full


def keep_in_flight(conn: Any, stop: Any, limit: int, count_sql: str, start_sql: str, params: tuple[Any, ...],
                   timed: Callable[[str, int], Any]) -> None:  # fmt: skip
    """The peak producer of every system alike: keep `limit` runs started. It counts the runs in
    flight (`count_sql`, served by the runs' status index) at most every LOOK_EVERY s, and starts
    what is missing in pipelines of START_BATCH, each start its own transaction: the producer's
    round-trip latency never limits a pool, and its polling costs the server little."""
    while not stop.is_set():
        row = conn.execute(count_sql, params[:1]).fetchone()
        missing = limit - (row[0] if row is not None else 0)
        if missing <= 0:
            stop.wait(LOOK_EVERY)  # backlog full: let the workers catch up
            continue
        for first in range(0, missing, START_BATCH):
            n = min(START_BATCH, missing - first)
            with timed("starts (pipelined)", n), conn.pipeline():
                for _ in range(n):
                    conn.execute(start_sql, params)


def paced_start(stop: Any, rate: float, start: Callable[[], object]) -> None:
    """Start a run every 1/`rate` s on a fixed schedule until `stop` (rate 0: start nothing)."""
    if rate <= 0:
        stop.wait()
        return
    interval, next_at = 1.0 / rate, time.monotonic()
    while not stop.is_set():
        start()
        next_at += interval
        if (delay := next_at - time.monotonic()) > 0:
            stop.wait(delay)
