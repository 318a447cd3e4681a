"""The starvation experiment: does a backlog of A tasks delay B?

`probes` v2 A -> B runs are started first, then `backlog` more, so every probe's A is at the
head of the queue. In plain flow mode a probe's B message joins the one queue behind the whole
backlog; with private step queues it has its own queue and its own worker. B's latency (from B's
task being created by reconciliation to B's settlement) is read back from the database for
the probes; the same total worker count serves both modes. A measurement, never a test.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from evidence_lib.engine import v2
from evidence_lib.engine.flows import AnyFlow, Flow, compile_flow, with_step_queues
from evidence_lib.engine.jsontypes import Json
from evidence_lib.pg import db, migrate
from evidence_lib.pg.db import Server, connect
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.timing import percentile
from evidence_lib.workers.v2 import V2Worker

PROGRESS_POLL = 0.1  # seconds between two progress reads while the probes drain (not an ordering)


@dataclass(frozen=True)
class StarvationResult:
    mode: str
    backlog: int
    probes: int
    workers: int
    a_ms: float
    b_p50_ms: float
    b_p95_ms: float
    b_max_ms: float
    seconds: float
    b_done_while_a_queued: bool = False  # every probe completed while A tasks were still unclaimed
    a_unclaimed: int = 0  # A tasks never claimed when the probes were done (the pools stop then)
    latencies_ms: list[float] = field(default_factory=list, compare=False)


def _flow(a_ms: float, mode: str) -> AnyFlow:
    def slow_a(payload: Json) -> Json:
        time.sleep(a_ms / 1000)  # the simulated work of a slow step
        return {"a": True}

    def fast_b(payload: Json) -> Json:
        return {"b": True}

    flow: Flow[Any] = Flow("starve", max_attempts=1, timeout=900)
    flow.add("A", slow_a).add("B", fast_b, deps=["A"])
    return with_step_queues(flow) if mode == "step" else flow


def run_mode(
    server: Server, mode: str, *, backlog: int, probes: int, workers: int, a_ms: float, timeout: float = 600.0
) -> StarvationResult:
    flow = _flow(a_ms, mode)
    with db.scratch_database(server, prefix="starve") as url:
        migrate.apply_migrations(url)
        with connect(url, application_name="starvation") as conn:
            compile_flow(conn, flow)
            probe_ids = [v2.start_run(conn, "starve", {"probe": i}) for i in range(probes)]
            conn.execute(
                "select count(engine.v2_start_run('starve', '{}'::jsonb)) from generate_series(1, %s)", (backlog,)
            )
            if mode == "step":
                pools = [
                    V2Worker.serving(
                        url,
                        flow,
                        "A",
                        config=WorkerConfig(
                            concurrency=max(1, workers - 1),
                            poll_interval=0.01,
                        ),
                        name="starve_a",
                    ),
                    V2Worker.serving(
                        url,
                        flow,
                        "B",
                        config=WorkerConfig(concurrency=1, poll_interval=0.01),
                        name="starve_b",
                    ),
                ]
            else:
                pools = [
                    V2Worker.serving(
                        url, flow, config=WorkerConfig(concurrency=workers, poll_interval=0.01), name="starve_plain"
                    )
                ]
            driver = Reconciler(url, poll_interval=0.01, name="starve_reconciler")
            threads = [threading.Thread(target=w.__enter__().run, kwargs={"handle_signals": False}) for w in pools]
            threads.append(threading.Thread(target=driver.run))
            started = time.perf_counter()
            for t in threads:
                t.start()
            finished = False
            try:
                deadline = time.monotonic() + timeout
                while time.monotonic() < deadline:
                    row = conn.execute(
                        "select count(*) from engine.runs where run_id = any(%s) and status <> 'completed'",
                        (probe_ids,),
                    ).fetchone()
                    if row is not None and row[0] == 0:
                        finished = True
                        break
                    time.sleep(PROGRESS_POLL)
            finally:
                seconds = time.perf_counter() - started
                for w in pools:
                    w.request_shutdown()
                driver.stop()
                for t in threads:
                    t.join(60)
            latencies = [
                float(r[0]) * 1000
                for r in conn.execute(
                    "select extract(epoch from s.settled_at - t.queued_at) from engine.step_tasks t "
                    "join engine.task_claims c using (run_id, step_slug, task_index) "
                    "join engine.task_settlements s on s.claim_id = c.claim_id "
                    "where t.step_slug = 'B' and t.run_id = any(%s)",
                    (probe_ids,),
                ).fetchall()
            ]
            # read after the pools stopped, which they do only once every probe completed: an A task
            # never claimed was still queued then (not "the last A claimed after the last B settled",
            # which raced with the shutdown: a pool between two claims at that moment made it false)
            unclaimed = conn.execute(
                "select count(*) from engine.step_tasks as t where t.step_slug = 'A' and not exists "
                "(select from engine.task_claims as c where c.run_id = t.run_id and c.step_slug = 'A')"
            ).fetchone()
            a_unclaimed = int(unclaimed[0]) if unclaimed else 0
    return StarvationResult(
        mode,
        backlog,
        probes,
        workers,
        a_ms,
        percentile(latencies, 50),
        percentile(latencies, 95),
        max(latencies, default=float("nan")),
        seconds,
        b_done_while_a_queued=finished and a_unclaimed > 0,
        a_unclaimed=a_unclaimed,
        latencies_ms=sorted(latencies),
    )


def run_starvation(
    server: Server, *, backlog: int = 10_000, probes: int = 50, workers: int = 4, a_ms: float = 10.0
) -> list[StarvationResult]:
    return [
        run_mode(server, mode, backlog=backlog, probes=probes, workers=workers, a_ms=a_ms) for mode in ("flow", "step")
    ]
