"""The starvation experiment: does a backlog of slow A tasks delay B?

Runs `backlog` A -> B runs at once, in plain flow mode (one queue, one pool of `workers`) and
with private step queues (the same total: a pool for A and a pool for B), and reads B's
end-to-end latency (from B's message being sent to B's completion) back from `step_tasks`.
A measurement for `make bench` and the performance evidence, never a test assertion.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from evidence_lib import db, engine, migrate
from evidence_lib.db import Server, connect
from evidence_lib.flows import AnyFlow, Flow, compile_flow, with_step_queues
from evidence_lib.jsontypes import Json
from evidence_lib.timing import percentile
from evidence_lib.worker import Worker
from evidence_lib.worker_common import WorkerConfig

PROGRESS_POLL = 0.05  # seconds between two progress reads while runs drain (not an ordering)


@dataclass(frozen=True)
class StarvationResult:
    mode: str
    backlog: int
    workers: int
    a_seconds: float
    b_p50_ms: float
    b_p95_ms: float
    b_max_ms: float
    drain_seconds: float


def _flow(a_seconds: float) -> Flow[Any]:
    def slow_a(payload: Json) -> Json:
        time.sleep(a_seconds)  # the simulated work of a slow step
        return {"a": True}

    def fast_b(payload: Json) -> Json:
        return {"b": True}

    flow: Flow[Any] = Flow("starve", max_attempts=1, timeout=120)
    flow.add("A", slow_a).add("B", fast_b, deps=["A"])
    return flow


def _pools(url: str, flow: AnyFlow, mode: str, workers: int) -> list[Worker]:
    if mode == "flow":
        return [
            Worker.serving(
                url,
                flow,
                config=WorkerConfig(concurrency=workers, poll_interval=0.01),
                name="starve_plain",
            )
        ]
    a_share = max(1, workers - workers // 2)
    return [
        Worker.serving(
            url,
            flow,
            "A",
            config=WorkerConfig(concurrency=a_share, poll_interval=0.01),
            name="starve_a",
        ),
        Worker.serving(
            url,
            flow,
            "B",
            config=WorkerConfig(concurrency=max(1, workers - a_share), poll_interval=0.01),
            name="starve_b",
        ),
    ]


def run_mode(server: Server, mode: str, *, backlog: int, workers: int, a_seconds: float) -> StarvationResult:
    base = _flow(a_seconds)
    flow: AnyFlow = with_step_queues(base) if mode == "step" else base
    with db.scratch_database(server, prefix="starve") as url:
        migrate.apply_migrations(url)
        with connect(url) as conn:
            compile_flow(conn, flow)
            with conn.transaction():
                for i in range(backlog):
                    engine.start_flow(conn, "starve", {"i": i})
            pools = _pools(url, flow, mode, workers)
            threads = []
            start = time.perf_counter()
            for w in pools:
                w.__enter__()
                threads.append(threading.Thread(target=w.run, kwargs={"handle_signals": False}))
            for t in threads:
                t.start()
            while True:
                row = conn.execute("select count(*) from engine.runs where status <> 'completed'").fetchone()
                if row is not None and row[0] == 0:
                    break
                time.sleep(PROGRESS_POLL)
            drain = time.perf_counter() - start
            for w in pools:
                w.request_shutdown()
            for t in threads:
                t.join()
            latencies = [
                float(r[0])
                for r in conn.execute(
                    "select extract(epoch from completed_at - queued_at) from engine.step_tasks where step_slug = 'B'"
                ).fetchall()
            ]
    return StarvationResult(
        mode,
        backlog,
        workers,
        a_seconds,
        percentile(latencies, 50) * 1000,
        percentile(latencies, 95) * 1000,
        max(latencies) * 1000,
        drain,
    )


def run_starvation(
    server: Server, *, backlog: int = 200, workers: int = 2, a_seconds: float = 0.02
) -> list[StarvationResult]:
    return [run_mode(server, mode, backlog=backlog, workers=workers, a_seconds=a_seconds) for mode in ("flow", "step")]


def format_starvation(results: list[StarvationResult]) -> str:
    lines = [
        f"{'mode':<12} {'backlog':>7} {'workers':>7} {'A s':>6} {'B p50 ms':>9} "
        f"{'B p95 ms':>9} {'B max ms':>9} {'drain s':>8}"
    ]
    for r in results:
        label = "plain flow" if r.mode == "flow" else "step queues"
        lines.append(
            f"{label:<12} {r.backlog:>7} {r.workers:>7} {r.a_seconds:>6.3f} "
            f"{r.b_p50_ms:>9.1f} {r.b_p95_ms:>9.1f} {r.b_max_ms:>9.1f} "
            f"{r.drain_seconds:>8.2f}"
        )
    return "\n".join(lines)
