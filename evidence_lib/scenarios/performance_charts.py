"""Scenario 7, performance: `perf.json` (one entry per system and worker count, the latencies, the
idle cost and issue 26's targets, each met or missed) and the charts of the worker pools."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from evidence_lib.results.scenario import ScenarioResult

COLOURS = {"raw": "black", "anchor": "#dd8452", "v1": "#4c72b0", "v2": "#55a868", "v2 polling": "#8c8c8c"}


def _records(result: ScenarioResult, name: str) -> list[dict[str, Any]]:
    frame = result.tables.get(name)
    if frame is None:
        return []
    return [{str(k): (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
            for r in frame.to_dict("records")]  # fmt: skip


def _value(row: dict[str, Any] | None, key: str) -> float | None:
    return None if row is None or row.get(key) is None else float(row[key])


def _get(rows: list[dict[str, Any]], system: str, workers: int, key: str) -> float | None:
    for r in rows:
        if r["system"] == system and int(r["workers"]) == workers and r.get(key) is not None:
            return float(r[key])
    return None


def at_least(want: float) -> Callable[[float], bool]:
    return lambda x: x >= want


class Targets:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def add(self, target: str, value: float | None, ok: Callable[[float], bool], shown: str = "{:.2f}") -> None:
        self.rows.append({"target": target, "measured": "not measured" if value is None else shown.format(value),
                          "met": None if value is None else bool(ok(value))})  # fmt: skip


def _history_runs(row: dict[str, Any]) -> int:
    """The runs of history a growth row loaded ("10000 completed runs"); -1 for the row measured
    after pruning ("after pruning 100000 runs")."""
    head = str(row.get("history") or "").split(" ")[0]
    return int(head) if head.isdigit() else -1


def perf_document(result: ScenarioResult) -> dict[str, Any]:
    """perf.json from the tables the parts recorded (a part that did not run leaves its figures out)."""
    pools = _records(result, "pools")
    counts = sorted({int(r["workers"]) for r in pools})
    bound = {n: (raw / 2 if (raw := _get(pools, "raw", n, "units_per_s")) else None) for n in counts}
    raw_cpu = {n: (c * 2 if (c := _get(pools, "raw", n, "server_cpu_ms_per_unit")) else None) for n in counts}
    entries = [
        {
            "system": r["system"],
            "workers": int(r["workers"]),
            "runs_per_s": r["units_per_s"],
            "bound_fraction": round(r["units_per_s"] / b, 3) if (b := bound.get(int(r["workers"]))) else None,
            "round_trips_per_run": r["round_trips_per_unit"],
            "server_cpu_ms_per_run": r["server_cpu_ms_per_unit"],
            "latency_ms": {
                "p50": r["latency_p50_ms"],
                "p95": r["latency_p95_ms"],
                "p99": r["latency_p99_ms"],
                "load": "peak: a backlog of 32 runs per worker",
            },
        }
        for r in pools
        if r["system"] != "raw"
    ]
    latency = _records(result, "latency_end_to_end")
    idle = _records(result, "idle_pool")
    t = Targets()
    for n in counts:
        v2, anchor, v1 = (_get(pools, s, n, "units_per_s") for s in ("v2", "anchor", "v1"))
        want = 1.5 if n >= 4 else 1.2
        t.add(f"worker pools at {n}: v2 / anchor pool >= {want}", v2 / anchor if v2 and anchor else None,
              at_least(want))  # fmt: skip
        t.add(f"worker pools at {n}: v2 / v1 pool >= 0.9", v2 / v1 if v2 and v1 else None, lambda x: x >= 0.9)
        b = bound.get(n)
        t.add(f"worker pools at {n}: v2 >= 0.40 of the raw bound", v2 / b if v2 and b else None, lambda x: x >= 0.40)
        cpu, raw2 = _get(pools, "v2", n, "server_cpu_ms_per_unit"), raw_cpu.get(n)
        t.add(f"worker pools at {n}: server CPU per v2 run <= 3.0 x raw PGMQ's for two messages",
              cpu / raw2 if cpu and raw2 else None, lambda x: x <= 3.0)  # fmt: skip
    v2_rates = [(n, _get(pools, "v2", n, "units_per_s")) for n in counts]
    falls = [f"{a[0]}->{b[0]}" for a, b in itertools.pairwise(v2_rates)
             if a[1] and b[1] and b[1] < a[1] * 0.95]  # fmt: skip
    if len(v2_rates) > 1:
        t.rows.append({"target": "v2 throughput does not fall as workers grow (5 % tolerance for noise)",
                       "measured": ", ".join(f"{n}: {r:.0f}" for n, r in v2_rates if r) or "not measured",
                       "met": not falls})  # fmt: skip
    if counts:
        top = counts[-1]
        t.add(f"round trips per v2 run at {top} workers <= 7", _get(pools, "v2", top, "round_trips_per_unit"),
              lambda x: x <= 7)  # fmt: skip
    lone = next((r for r in latency if r["system"] == "v2" and r["load"] == "one run at a time"), None)
    t.add("low load: v2 A -> B p50 <= 15 ms", _value(lone, "p50_ms"), lambda x: x <= 15, "{:.1f} ms")
    t.add("low load: v2 A -> B p99 <= 50 ms", _value(lone, "p99_ms"), lambda x: x <= 50, "{:.1f} ms")
    v2_idle = next((r for r in idle if r["system"] == "v2"), None)
    t.add("an idle v2 pool with its reconciler: <= 2 queries/s (client count)",
          _value(v2_idle, "client_queries_per_s"), lambda x: x <= 2, "{:.2f}/s")  # fmt: skip
    t.add("an idle v2 pool with its reconciler: <= 2 transactions/s (server count, pg_stat_database)",
          _value(v2_idle, "server_transactions_per_s"), lambda x: x <= 2, "{:.2f}/s")  # fmt: skip
    for r in _records(result, "comparison_ratios"):
        t.add(f"plain client at {r['connections']} connection(s): v2 / anchor >= 1.2", r.get("v2_over_anchor"),
              lambda x: x >= 1.2)  # fmt: skip
    growth = _records(result, "growth")
    if len(growth) > 1 and growth[0].get("v2_runs_per_s"):
        big = max(growth[1:], key=_history_runs)
        t.add(f"history: runs/s with {big.get('history')} of history within 10 % of an empty database",
              big["v2_runs_per_s"] / growth[0]["v2_runs_per_s"], lambda x: x >= 0.9, "{:.2f} of empty")  # fmt: skip
    return {
        "parameters": result.parameters,
        "raw_pgmq": [
            {
                "workers": n,
                "msgs_per_s": _get(pools, "raw", n, "units_per_s"),
                "bound_runs_per_s": bound[n],
                "server_cpu_ms_per_two_messages": raw_cpu[n],
            }
            for n in counts
        ],
        "entries": entries,
        "latency_end_to_end": latency,
        "idle": idle,
        "plain_client": _records(result, "comparison_ratios"),
        "history": growth,
        "targets": t.rows,
    }


def pool_charts(result: ScenarioResult) -> None:
    pools = _records(result, "pools")
    if not pools:
        return
    frame = pd.DataFrame(pools)
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for system, rows in frame.groupby("system"):
        label = "raw PGMQ bound (msgs/s / 2)" if system == "raw" else f"{system} pool"
        values = rows["units_per_s"] / (2 if system == "raw" else 1)
        ax.plot(rows["workers"], values, marker="o", label=label, color=COLOURS.get(str(system)),
                linestyle="--" if system == "raw" else "-")  # fmt: skip
    ax.set_xticks(sorted(frame["workers"].unique()))
    ax.set_xlabel("workers (connections for raw PGMQ)")
    ax.set_ylabel("A -> B runs/s (median of repetitions)")
    ax.set_title("Worker pools side by side, interleaved, one server")
    ax.legend(fontsize=8)
    fig.tight_layout()
    result.chart("pools", fig)
    latency = _records(result, "latency_end_to_end")
    if latency:
        fig, ax = plt.subplots(figsize=(7.5, 3.2))
        labels = [f"{r['system']}, {r['load']}" for r in latency]
        for key, marker in (("p50_ms", "o"), ("p95_ms", "s"), ("p99_ms", "^")):
            ax.scatter([r[key] if r[key] is not None else float("nan") for r in latency], labels, marker=marker,
                       label=key.removesuffix("_ms"))  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("end-to-end A -> B latency, ms (server timestamps)")
        ax.set_ylabel("system and load")
        ax.set_title("Latency of a run: alone, and at half of each pool's peak")
        ax.legend(fontsize=8)
        fig.tight_layout()
        result.chart("latency_end_to_end", fig)
