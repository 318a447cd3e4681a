"""Throughput on one server in one run: the measuring window every case shares, and raw PGMQ.

- raw PGMQ: `connections` loops of send + read + archive (one message each): the bound;
- the worker pools (anchor, v1, v2): `bench.pools`.
Every participant is its own process (`bench.participants`), the raw loops included.
Each case warms up, then measures a fixed window: units done (read back from the database),
every SQL call's latency (client side), round trips per unit, and the server's CPU time (the
postmaster's process tree, when the server is local).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import psutil

from evidence_lib.bench.participants import Spec, run_case
from evidence_lib.pg.db import Server, connect, one
from evidence_lib.workers.timing import CallTimes

BACKLOG_PER_WORKER = 32  # runs the producer keeps in flight per worker (the pipeline has reconcile latency)


@dataclass
class Throughput:
    case: str
    workers: int
    seconds: float
    units: int
    unit: str
    calls: CallTimes
    server_cpu_s: float | None
    connections: int
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def per_second(self) -> float:
        return self.units / self.seconds if self.seconds else 0.0

    @property
    def round_trips_per_unit(self) -> float:
        total = sum(len(v) for v in self.calls.samples.values())
        return total / self.units if self.units else float("nan")

    @property
    def cpu_ms_per_unit(self) -> float | None:
        return None if self.server_cpu_s is None or not self.units else self.server_cpu_s * 1000 / self.units


class ServerCpu:
    """CPU seconds used by the server's processes, when the server runs on this machine: the
    postmaster is found as the parent of our own backend (None for a remote server)."""

    def __init__(self, server: Server) -> None:
        self.root: psutil.Process | None = None
        with connect(server.maintenance_url, application_name="perf_cpu") as conn:
            row = conn.execute("select pg_backend_pid()").fetchone()
            try:  # while the connection (and so the backend) is alive
                backend = psutil.Process(int(row[0])) if row else None
                parent = backend.parent() if backend is not None else None
                if parent is not None and "postgres" in " ".join(parent.cmdline()):
                    self.root = parent
            except psutil.Error:
                self.root = None

    def seconds(self) -> float | None:
        if self.root is None:
            return None
        root = self.root.cpu_times()  # children_* holds the backends that already exited
        total = float(root.user + root.system + root.children_user + root.children_system)
        for proc in self.root.children(recursive=True):
            try:
                t = proc.cpu_times()
                total += float(t.user + t.system)
            except psutil.Error:
                continue
        return total


def measure(
    server: Server, url: str, specs: list[Spec], count_sql: str, warmup: float, seconds: float
) -> dict[str, Any]:
    """Run the participants, warm up, then measure a window: units done (read back with
    `count_sql`), every call's latency, the server's, the clients' and everything else's CPU."""
    cpu = ServerCpu(server)
    with run_case(url, specs) as (handle, finish), connect(url, application_name="perf_window") as conn:
        time.sleep(warmup)  # warm-up: processes connected, plans cached (not an ordering)
        handle.reset.set()
        since = one(conn, "select clock_timestamp()")
        units0, cpu0, client0, t0, all0 = (
            int(one(conn, count_sql)),
            cpu.seconds(),
            handle.cpu_seconds(),
            time.perf_counter(),
            _machine_cpu(),
        )
        time.sleep(seconds)  # the measuring window
        units1, cpu1, client1, t1, all1 = (
            int(one(conn, count_sql)),
            cpu.seconds(),
            handle.cpu_seconds(),
            time.perf_counter(),
            _machine_cpu(),
        )
        until = one(conn, "select clock_timestamp()")
        calls, errors = finish()
    return {
        "units": units1 - units0,
        "seconds": t1 - t0,
        "calls": calls,
        "errors": errors,
        "server_cpu": None if cpu0 is None or cpu1 is None else cpu1 - cpu0,
        "client_cpu": client1 - client0,
        "window": (since, until),  # the server's clock at the window's ends
        "foreign_cpu": None
        if cpu0 is None or cpu1 is None
        else max(0.0, (all1 - all0) - (cpu1 - cpu0) - (client1 - client0)),
    }


def _machine_cpu() -> float:
    """CPU seconds the whole machine spent outside idle (all cores)."""
    t = psutil.cpu_times()
    return float(t.user + t.system + getattr(t, "nice", 0.0) + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0))


def _result(case: str, workers: int, unit: str, specs: list[Spec], out: dict[str, Any]) -> Throughput:
    return Throughput(
        case,
        workers,
        out["seconds"],
        out["units"],
        unit,
        out["calls"],
        out["server_cpu"],
        len(specs),
        {"client_cpu_s": out["client_cpu"], "errors": out["errors"], "window": out["window"]},
    )


def raw_pgmq(server: Server, url: str, connections: int, seconds: float, warmup: float = 1.5) -> Throughput:
    with connect(url) as conn:
        conn.execute("select pgmq.create('perf_raw')")
    specs: list[Spec] = [("raw", {"queue": "perf_raw"}) for _ in range(connections)]
    out = measure(server, url, specs, "select count(*) from pgmq.a_perf_raw", warmup, seconds)
    return _result("raw PGMQ send+read+archive", connections, "msgs", specs, out)
