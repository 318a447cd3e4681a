"""The benchmark (`make bench`): one server, one run, ratios side by side. Never a test.

Cases, each at 1 and 2 concurrent connections for a fixed measuring time:
- raw PGMQ: send + read + archive of one message per loop;
- v1 A -> B: start_flow, then read + start_tasks + complete_task for A and again for B.
Throughput is read back from the database (archived messages, completed runs), latency per
SQL call is measured client-side.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from evidence_lib import db, engine, migrate
from evidence_lib.db import Conn, Server, connect
from evidence_lib.flows import Flow, compile_flow
from evidence_lib.timing import CallTimes

Body = Callable[[Conn, CallTimes, int], None]


@dataclass
class CaseResult:
    case: str
    connections: int
    seconds: float
    units: int
    unit: str
    times: CallTimes

    @property
    def per_second(self) -> float:
        return self.units / self.seconds if self.seconds else 0.0


def measure(url: str, connections: int, seconds: float, body: Body) -> tuple[float, CallTimes]:
    """Run `body` in a loop on `connections` threads (one connection each) for `seconds`."""
    stop = threading.Event()
    times = CallTimes()
    lock = threading.Lock()
    errors: list[BaseException] = []
    barrier = threading.Barrier(connections + 1)

    def loop(index: int) -> None:
        mine = CallTimes()
        with connect(url, application_name=f"bench_{index}") as conn:
            barrier.wait()
            try:
                while not stop.is_set():
                    body(conn, mine, index)
            except BaseException as exc:
                errors.append(exc)
        with lock:
            times.merge(mine)

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    stop.wait(seconds)  # the measuring window, not an ordering
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    if errors:
        raise errors[0]
    return elapsed, times


def raw_pgmq_body(queue: str) -> Body:
    def body(conn: Conn, t: CallTimes, _: int) -> None:
        t.call("pgmq.send", lambda: conn.execute("select pgmq.send(%s, '{}')", (queue,)))
        rows = t.call(
            "pgmq.read",
            lambda: conn.execute("select msg_id from pgmq.read(%s, 30, 1)", (queue,)).fetchall(),
        )
        for (mid,) in rows:
            with t.time("pgmq.archive"):
                conn.execute("select pgmq.archive(%s, %s::bigint)", (queue, mid))

    return body


def v1_body(flow: str, queue: str) -> Body:
    def body(conn: Conn, t: CallTimes, _: int) -> None:
        t.call("start_flow", lambda: engine.start_flow(conn, flow, {"n": 1}))
        for _step in range(2):
            msgs = t.call("pgmq.read", lambda: engine.read_messages(conn, queue, 30, 1))
            if not msgs:
                return
            ids = [m.msg_id for m in msgs]
            grants = t.call("start_tasks", lambda: engine.start_tasks(conn, queue, ids))  # noqa: B023
            for g in grants:
                with t.time("complete_task"):
                    engine.complete_task(conn, g.run_id, g.step_slug, g.task_index, {"ok": True})

    return body


def server_facts(conn: Conn) -> dict[str, Any]:
    names = [
        "server_version",
        "fsync",
        "synchronous_commit",
        "shared_buffers",
        "max_connections",
        "wal_level",
    ]
    facts: dict[str, Any] = {n: conn.execute(f"show {n}").fetchone()[0] for n in names}  # type: ignore[index]
    facts["pgmq"] = migrate.ensure_pgmq(conn)
    return facts


def run_benchmark(
    server: Server, *, seconds: float = 3.0, connection_counts: tuple[int, ...] = (1, 2)
) -> tuple[dict[str, Any], list[CaseResult]]:
    results: list[CaseResult] = []
    with db.scratch_database(server, prefix="bench") as url:
        migrate.apply_migrations(url)
        with connect(url) as conn:
            conn.execute("select pgmq.create('bench_raw')")
            flow: Flow[Any] = Flow("bench_ab", max_attempts=1)
            flow.add("A", lambda x: x).add("B", lambda x: x, deps=["A"])
            compile_flow(conn, flow)
            facts = server_facts(conn)
        for n in connection_counts:
            with connect(url) as conn:
                before = conn.execute("select count(*) from pgmq.a_bench_raw").fetchone()
            elapsed, times = measure(url, n, seconds, raw_pgmq_body("bench_raw"))
            with connect(url) as conn:
                after = conn.execute("select count(*) from pgmq.a_bench_raw").fetchone()
            assert before is not None and after is not None
            results.append(CaseResult("raw PGMQ send+read+archive", n, elapsed, after[0] - before[0], "msgs", times))
        for n in connection_counts:
            with connect(url) as conn:
                before = conn.execute("select count(*) from engine.runs where status = 'completed'").fetchone()
            elapsed, times = measure(url, n, seconds, v1_body("bench_ab", "bench_ab"))
            with connect(url) as conn:
                after = conn.execute("select count(*) from engine.runs where status = 'completed'").fetchone()
            assert before is not None and after is not None
            results.append(CaseResult("v1 A -> B runs", n, elapsed, after[0] - before[0], "runs", times))
    return facts, results


def format_results(facts: dict[str, Any], results: list[CaseResult]) -> str:
    lines = ["server: " + ", ".join(f"{k}={v}" for k, v in facts.items()), ""]
    lines.append(f"{'case':<30} {'conns':>5} {'per s':>9}  per-call p50 / p95 (ms)")
    for r in results:
        calls = "  ".join(f"{name} {s['p50_ms']:.2f}/{s['p95_ms']:.2f}" for name, s in r.times.summary_ms().items())
        lines.append(f"{r.case:<30} {r.connections:>5} {r.per_second:>9.1f}  {calls}")
    raw = {r.connections: r.per_second for r in results if r.unit == "msgs"}
    v1 = {r.connections: r.per_second for r in results if r.unit == "runs"}
    lines.append("")
    for n in sorted(raw):
        if raw[n] and n in v1:
            lines.append(f"ratio at {n} conn: v1 runs/s / (raw msgs/s / 2) = {v1[n] / (raw[n] / 2):.2f}")
    return "\n".join(lines)


def run_and_format(server: Server, *, seconds: float = 3.0) -> str:
    from evidence_lib.starvation import format_starvation, run_starvation

    facts, results = run_benchmark(server, seconds=seconds)
    starvation = run_starvation(server)
    return (
        format_results(facts, results) + "\n\nstarvation: B end-to-end latency behind a "
        "backlog of slow A tasks, same total worker count\n" + format_starvation(starvation)
    )
