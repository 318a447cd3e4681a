"""Scenario 7, performance: `perf.json` (one entry per system and worker count, the latencies, the
idle cost, the ratios with their intervals and issue 33's targets, each met or missed) and the
charts of the worker pools."""

from __future__ import annotations

from typing import Any

import matplotlib.pyplot as plt
import pandas as pd

from evidence_lib.bench import targets as performance_targets
from evidence_lib.bench.targets import get as _get
from evidence_lib.results.scenario import ScenarioResult

COLOURS = {"raw": "black", "anchor": "#dd8452", "v1": "#4c72b0", "v2": "#55a868", "v2 polling": "#8c8c8c"}


def _records(result: ScenarioResult, name: str) -> list[dict[str, Any]]:
    frame = result.tables.get(name)
    if frame is None:
        return []
    return [{str(k): (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
            for r in frame.to_dict("records")]  # fmt: skip


# what one run cost, from the WAL and wait-event sampling of each window (bench.costs)
COSTS = ("client_cpu_ms_per_unit", "commits_per_unit", "wal_bytes_per_unit", "row_locks_per_unit",
         "rows_inserted_per_unit", "rows_updated_per_unit", "hot_update_share", "lock_wait_share")  # fmt: skip


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
            **{key.replace("_per_unit", "_per_run"): r.get(key) for key in COSTS},
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
    ratios = _records(result, "pool_ratios")
    t = performance_targets.targets(pools, ratios, latency, idle, raw_cpu)
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
        "ratios": ratios,
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
