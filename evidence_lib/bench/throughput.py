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

from evidence_lib.bench.costs import WaitSampler, WalWindow, WindowCosts
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


SUB_WINDOW = 0.5  # seconds: the window is read in pieces of this length (the rate's steadiness)
STEADY = 0.10  # two consecutive warm-up pieces within 10 % of each other: the rate has settled


def _settle(conn: Any, count_sql: str, warmup: float) -> tuple[float, bool]:
    """Warm up for at least `warmup` s (its last two SUB_WINDOW pieces read), then until two
    consecutive pieces' rates are within STEADY of each other, for at most `warmup` s more.
    Returns the warm-up's length and whether the rate settled (a case that never settles is
    measured anyway, and says so)."""
    t0 = time.perf_counter()
    time.sleep(max(0.0, warmup - 2 * SUB_WINDOW))  # processes connected, plans cached (not an ordering)
    last, before, rates = int(one(conn, count_sql)), time.perf_counter(), []
    while time.perf_counter() - t0 < 2 * warmup:
        time.sleep(SUB_WINDOW)  # a piece of the warm-up (a measurement, not an ordering)
        now, at = int(one(conn, count_sql)), time.perf_counter()
        rates.append((now - last) / (at - before))
        last, before = now, at
        if len(rates) >= 2 and min(rates[-2:]) > 0 and abs(rates[-1] - rates[-2]) <= STEADY * max(rates[-2:]):
            return time.perf_counter() - t0, True
    return time.perf_counter() - t0, False


def measure(
    server: Server, url: str, specs: list[Spec], count_sql: str, warmup: float, seconds: float
) -> dict[str, Any]:
    """Run the participants, warm up until the rate settles, then measure a window in pieces:
    units done (read back with `count_sql`), every call's latency, the server's, the clients'
    and everything else's CPU, and what the window cost the server (`bench.costs`: WAL, commits,
    row locks, lock waits)."""
    cpu, wal, costs = ServerCpu(server), WalWindow(url), WindowCosts()
    counted = f"select ({count_sql}), pg_catalog.pg_current_wal_insert_lsn()::text, pg_catalog.clock_timestamp()"
    with run_case(url, specs) as (handle, finish), connect(url, application_name="perf_window") as conn:
        warmed, steady = _settle(conn, count_sql, warmup)
        with WaitSampler(url, costs):
            handle.reset.set()
            # the window's ends: units, the WAL position and the server's clock in one statement
            row = conn.execute(counted).fetchone()
            cpu0, client0, t0, all0 = cpu.seconds(), handle.cpu_seconds(), time.perf_counter(), _machine_cpu()
            assert row is not None
            units0, wal.begin, since = int(row[0]), str(row[1]), row[2]
            pieces, last, before = [], units0, t0
            while (left := t0 + seconds - time.perf_counter()) > 0:
                time.sleep(min(SUB_WINDOW, left))  # a piece of the measuring window
                row = conn.execute(counted).fetchone()
                now, at = int(row[0]) if row else last, time.perf_counter()
                pieces.append((now - last) / (at - before))
                last, before = now, at
            handle.freeze.set()
            cpu1, client1, all1 = cpu.seconds(), handle.cpu_seconds(), _machine_cpu()
            units1, t1 = last, before
            end, until = (str(row[1]), row[2]) if row else (None, None)
        wal.stop(costs, end)
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
        "warmup_s": warmed,
        "steady": steady,
        "piece_rates": pieces,
        "costs": costs,
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
        {key: out[key] for key in ("errors", "window", "warmup_s", "steady", "piece_rates", "costs")}
        | {"client_cpu_s": out["client_cpu"]},
    )


def raw_pgmq(server: Server, url: str, connections: int, seconds: float, warmup: float = 1.5) -> Throughput:
    with connect(url) as conn:
        conn.execute("select pgmq.create('perf_raw')")
    specs: list[Spec] = [("raw", {"queue": "perf_raw"}) for _ in range(connections)]
    out = measure(server, url, specs, "select count(*) from pgmq.a_perf_raw", warmup, seconds)
    return _result("raw PGMQ send+read+archive", connections, "msgs", specs, out)
