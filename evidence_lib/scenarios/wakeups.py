"""Scenario 4, reconciliation, continued: wake-ups (docs/contract.md, "Wake-ups").

An idle pool (two workers per queue) and an idle reconciler register as waiters; their fallback
poll is 30 s, far past this part's deadline, so a run that completes within it completed on the
engine's notifications alone. Read back afterwards: the run is completed, no wait ended by its
fallback, each of the run's two messages woke exactly one worker (as many reads as messages, none
empty), each wake-up consumed the woken worker's registration, and A's message woke the worker
that had waited longest on A's queue.
"""

from __future__ import annotations

import threading
import time

from evidence_lib.engine import v2
from evidence_lib.engine.flows import QueueMode, route
from evidence_lib.harness.ab_flow import define_ab, step_of
from evidence_lib.harness.waits import WaitTimeout, joined
from evidence_lib.pg.db import Conn, connect, one, rows
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.timing import CallTimes
from evidence_lib.workers.v2 import V2Worker
from evidence_lib.workers.wakeups import LINGER_POLLS

FALLBACK = 30.0  # every waiter's fallback poll: longer than any deadline below
REGISTERED = 3.0  # seconds for every waiter to register (workers start, connect and LISTEN)
DEADLINE = 3.0  # seconds a lone run may take on wake-ups (it takes milliseconds)
STOPPED = 3.0  # seconds for every worker and the reconciler to stop after the request, together
WORKERS_PER_QUEUE = 2


def _until(conn: Conn, query: str, want: int, what: str, timeout: float = DEADLINE) -> None:
    """Poll the database until `query` counts `want` (a liveness guard of seconds, orders nothing)."""
    deadline = time.monotonic() + timeout
    while int(one(conn, query)) != want:
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.01)


def _reads(pool: list[V2Worker]) -> int:
    return sum(len(w.timings.samples.get("pgmq.read", [])) for w in pool if w.timings is not None)


def wakeups(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    with connect(url) as conn:
        flow = define_ab(conn, "wake", mode)
    steps = ["A", "B"] if mode == "step" else ["A"]
    pool: list[V2Worker] = []
    for step in steps:
        for i in range(WORKERS_PER_QUEUE):
            config = WorkerConfig(concurrency=4, idle_wait=FALLBACK, poll_interval=FALLBACK)
            worker = V2Worker.serving(url, flow, step_of(flow, step), name=f"wake_{step}{i}", config=config)
            worker.timings = CallTimes()
            pool.append(worker)
    driver = Reconciler(url, idle_wait=FALLBACK, poll_interval=FALLBACK, name="wake_reconciler")
    threads = [threading.Thread(target=w.__enter__().run, kwargs={"handle_signals": False}, name=f"worker {i}")
               for i, w in enumerate(pool)]  # fmt: skip
    threads.append(threading.Thread(target=driver.run, name="reconciler"))
    a_channel = f"engine_queue_{route(flow, 'A')}"
    with connect(url, application_name="wake_observer") as conn:
        for t in threads:
            t.start()
        try:
            _until(conn, "select count(*) from engine.listeners", len(pool) + 1, "every waiter registered",
                   REGISTERED)  # fmt: skip
            order = [int(r["pid"]) for r in rows(conn, "select pid from engine.listeners where channel = %s "
                                                       "order by listening_since, pid", (a_channel,))]  # fmt: skip
            reads_before = _reads(pool)
            since = one(conn, "select clock_timestamp()")
            started = time.perf_counter()
            run_id = v2.start_run(conn, flow.slug, {"wake": 1})
            try:
                _until(conn, f"select count(*) from engine.runs where run_id = '{run_id}' and status = 'completed'",
                       1, "the lone run completed")  # fmt: skip
                completed = True
            except WaitTimeout:
                completed = False
            seconds = time.perf_counter() - started
            kept = rows(conn, "select pid from engine.listeners where listening_since < %s order by pid", (since,))
        finally:
            for w in pool:
                w.request_shutdown()
            driver.stop()
            joined(threads, STOPPED)
    waiters = [w._waiter for w in pool if w._waiter is not None] + [driver.waiter]
    fallbacks = sum(w.fallbacks for w in waiters)
    result.gate(
        "a_lone_run_completes_on_wake_ups_not_the_fallback_poll",
        completed and fallbacks == 0,
        f"completed: {completed} in {seconds * 1000:.0f} ms (deadline {DEADLINE:.0f} s, every fallback poll "
        f"{FALLBACK:.0f} s); waits ended by a fallback: {fallbacks}",
        mode,
    )
    woken = sum(w._waiter.wakeups for w in pool if w._waiter is not None)
    reads = _reads(pool) - reads_before
    granted = sum(w.stats.granted for w in pool)
    result.gate(
        "each_message_wakes_exactly_one_idle_worker",
        (woken, granted) == (2, 2),
        f"the run sent 2 messages; worker wake-ups {woken}, claims granted {granted}, reads {reads} (the woken "
        f"worker looks again {LINGER_POLLS} times before it registers again; {WORKERS_PER_QUEUE} idle workers "
        "per queue: a broadcast would wake them all)",
        mode,
    )
    woken_pids = {w._waiter.pid for w in pool if w._waiter is not None and w._waiter.wakeups}
    stale = sorted(int(r["pid"]) for r in kept if int(r["pid"]) in woken_pids)
    result.gate(
        "a_wake_up_consumes_the_registration",
        bool(woken_pids) and not stale,
        f"waiters woken (pids): {sorted(p for p in woken_pids if p)}; of them still registered since before the run "
        f"(not consumed by their wake-up): {stale}",
        mode,
    )
    first = next((w for w in pool if any(s.step_slug == "A" for s in w.stats.settlements)), None)
    got = None if first is None or first._waiter is None else first._waiter.pid
    result.gate(
        "the_worker_waiting_longest_is_woken",
        bool(order) and got == order[0],
        f"A's queue waiters by age (pids): {order}; A was claimed by the worker of pid {got}",
        mode,
    )
