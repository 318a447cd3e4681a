"""The benchmark's targets: those of issue 33 ("throughput, second step"), each measured and
shown as met or missed (a measurement, never a gate; a target not measured says so).

The worker pools' ratios are the geometric means of the pairs measured in the same repetition,
shown with their 95 % intervals (`bench.intervals.pool_ratios`); a target is met
when the ratio is, and the interval says how sure that is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

POOL_COUNTS = (1, 2, 4, 8)  # the worker counts issue 33 names for v2 / anchor


def value(row: dict[str, Any] | None, key: str) -> float | None:
    return None if row is None or row.get(key) is None else float(row[key])


def get(rows: list[dict[str, Any]], system: str, workers: int, key: str) -> float | None:
    for r in rows:
        if r["system"] == system and int(r["workers"]) == workers and r.get(key) is not None:
            return float(r[key])
    return None


def at_least(want: float) -> Callable[[float], bool]:
    return lambda x: x >= want


class Targets:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, target: str, measured: float | None, ok: Callable[[float], bool], shown: str = "{:.2f}",
            interval: str = "") -> None:  # fmt: skip
        text = "not measured" if measured is None else (interval or shown.format(measured))
        self.rows.append({"target": target, "measured": text, "met": None if measured is None else bool(ok(measured))})


def _ratio(ratios: list[dict[str, Any]], name: str, workers: int) -> dict[str, Any] | None:
    return next((r for r in ratios if r["ratio"] == name and int(r["workers"]) == workers), None)


def _latency(latency: list[dict[str, Any]], load: str) -> dict[str, Any] | None:
    return next((r for r in latency if r["system"] == "v2" and r["load"] == load), None)


def targets(pools: list[dict[str, Any]], ratios: list[dict[str, Any]], latency: list[dict[str, Any]],
            idle: list[dict[str, Any]], raw_cpu: dict[int, float | None]) -> Targets:  # fmt: skip
    """Every target of issue 33 the tables can answer."""
    t = Targets()
    counts = sorted({int(r["workers"]) for r in pools})
    for n in counts:
        for name, want in (("v2 / v1", 0.8), ("v2 / anchor", 1.2)):
            if name == "v2 / anchor" and n not in POOL_COUNTS:
                continue
            r = _ratio(ratios, name, n)
            t.add(f"worker pools at {n}: {name} pool >= {want}", value(r, "value"), at_least(want),
                  interval=str(r["shown"]) if r else "")  # fmt: skip
        cpu, raw2 = get(pools, "v2", n, "server_cpu_ms_per_unit"), raw_cpu.get(n)
        t.add(f"worker pools at {n}: server CPU per v2 run <= 3 x raw PGMQ's for two messages",
              cpu / raw2 if cpu and raw2 else None, lambda x: x <= 3.0, "{:.2f} x")  # fmt: skip
    if 2 in counts and 8 in counts:
        at2, at8 = get(pools, "v2", 2, "units_per_s"), get(pools, "v2", 8, "units_per_s")
        t.add("v2 at 8 workers >= v2 at 2 workers", at8 / at2 if at8 and at2 else None, lambda x: x >= 1.0,
              "{:.2f} of 2 workers")  # fmt: skip
    if counts:
        top = counts[-1]
        t.add(f"round trips per v2 run at {top} workers <= 7", get(pools, "v2", top, "round_trips_per_unit"),
              lambda x: x <= 7)  # fmt: skip
        t.add(f"commits per v2 run at {top} workers <= 4 (WAL commit records)",
              get(pools, "v2", top, "commits_per_unit"), lambda x: x <= 4)  # fmt: skip
        t.add(f"at peak ({top} workers): v2 p99 <= 250 ms", get(pools, "v2", top, "latency_p99_ms"),
              lambda x: x <= 250, "{:.1f} ms")  # fmt: skip
    half = _latency(latency, "half of peak")
    t.add("at half of peak: v2 p99 <= 100 ms", value(half, "p99_ms"), lambda x: x <= 100, "{:.1f} ms")
    lone = _latency(latency, "one run at a time")
    t.add("a lone run: v2 A -> B p50 <= 10 ms", value(lone, "p50_ms"), lambda x: x <= 10, "{:.1f} ms")
    t.add("a lone run: v2 A -> B p99 <= 30 ms", value(lone, "p99_ms"), lambda x: x <= 30, "{:.1f} ms")
    v2_idle = next((r for r in idle if r["system"] == "v2"), None)
    t.add("an idle v2 pool with its reconciler: <= 2 queries/s (client count)",
          value(v2_idle, "client_queries_per_s"), lambda x: x <= 2, "{:.2f}/s")  # fmt: skip
    t.add("an idle v2 pool with its reconciler: <= 2 transactions/s (server count, pg_stat_database)",
          value(v2_idle, "server_transactions_per_s"), lambda x: x <= 2, "{:.2f}/s")  # fmt: skip
    return t
