"""Scenario 7, performance, continued: the side-by-side comparison with the released anchor, the
cost as history grows, and the charts a maintainer looks at (throughput and latency over time
with every injected fault drawn as a shaded band, as Jepsen's performance plots do)."""

from __future__ import annotations

import statistics
from typing import Any

import matplotlib.pyplot as plt

from evidence_lib import progress
from evidence_lib.bench.comparison import TARGETS, compare
from evidence_lib.bench.growth import growth
from evidence_lib.pg.db import Server
from evidence_lib.results.scenario import ScenarioResult

BIN = 0.5  # seconds per point of the over-time charts

BAND_COLOURS = {"lost acknowledgement": "#d62728", "takeover": "#ff7f0e", "server crash": "#7f7f7f"}


def comparison(
    result: ScenarioResult, server: Server, repetitions: int, seconds: float, anchor_version: str, connections: str
) -> None:
    counts = tuple(int(c) for c in connections.split(",") if c.strip())
    outcome = compare(
        server,
        connections=counts,
        repetitions=repetitions,
        seconds=seconds,
        anchor_version=anchor_version,
        progress=progress.phase,
    )
    result.table("comparison", outcome.table())
    calls: dict[tuple[str, int, str], list[float]] = {}
    for sample in outcome.samples:
        for call, ms in sample.calls.items():
            calls.setdefault((sample.system, sample.connections, call), []).append(ms)
    result.table(
        "comparison_calls",
        [
            {"system": system, "connections": n, "call": call, "p50_ms": round(statistics.median(values), 3)}
            for (system, n, call), values in sorted(calls.items())
        ],
    )
    ratios = result.table("comparison_ratios", outcome.ratios())
    result.headline = "; ".join(
        f"{r['connections']} conn: v2/anchor {_x(r.get('v2_over_anchor'))}, v2/v1 {_x(r.get('v2_over_v1'))}"
        for r in ratios.to_dict("records")
    )
    if outcome.anchor_note:
        result.notes.append(f"released anchor (pgflow {anchor_version}): {outcome.anchor_note}")
    else:
        result.notes.append(f"released anchor: pgflow {anchor_version} from npm, measured on this server")
    missed = [
        f"{k} at {r['connections']} connection(s): {r[k]} (target {'<=' if k.endswith('ms_per_run') else '>='} {t})"
        for r in ratios.to_dict("records")
        for k, t in TARGETS.items()
        if r.get(k) is not None and not _met(k, r[k], t)
    ]
    result.targets_missed += missed
    fig, ax = plt.subplots(figsize=(8, 3.5))
    systems = ["raw bound", "anchor", "v1", "v2"]
    width = 0.2
    for j, row in enumerate(ratios.to_dict("records")):
        values = [row["raw_bound_runs_per_s"], row["anchor_runs_per_s"], row["v1_runs_per_s"], row["v2_runs_per_s"]]
        xs = [i + j * width for i in range(len(systems))]
        ax.bar(xs, [v or 0 for v in values], width, label=f"{row['connections']} connection(s)")
    ax.set_xticks([i + width / 2 for i in range(len(systems))], systems)
    ax.set_xlabel("system (the raw bound is PGMQ messages/s divided by 2)")
    ax.set_ylabel("A -> B runs/s (median)")
    ax.set_title("One plain-SQL client for every system, one server, one run")
    ax.legend()
    fig.tight_layout()
    result.chart("comparison", fig)


def _x(value: Any) -> str:
    return "not measured" if value is None or value != value else f"{float(value):.2f}x"


def _met(key: str, value: Any, target: float) -> bool:
    return bool(value <= target if key.endswith("ms_per_run") else value >= target)


def history(result: ScenarioResult, server: Server, points: str, seconds: float) -> None:
    counts = tuple(int(p) for p in points.split(",") if p.strip())
    if not counts:
        return
    rows = result.table("growth", growth(server, points=counts, seconds=seconds, progress=progress.phase))
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.bar(rows["history"].astype(str), rows["v2_runs_per_s"], color="#4c72b0")
    ax.set_xlabel("history: completed runs in the tables")
    ax.set_ylabel("v2 runs/s (1 connection)")
    ax2 = ax.twinx()
    ax2.plot(rows["history"].astype(str), rows["server_cpu_ms_per_run"], "o-", color="#c44e52")
    ax2.set_ylabel("server CPU ms per run")
    ax.set_title("Does a run cost more when history grows?")
    ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    result.chart("growth", fig)


def over_time(
    result: ScenarioResult,
    name: str,
    title: str,
    completions: list[tuple[float, float]],
    faults: list[tuple[float, float, str]],
) -> None:
    """Runs completed per second and median run latency over time, faults shaded."""
    if not completions:
        return
    start = min(t for t, _ in completions)
    bins: dict[int, list[float]] = {}
    for t, ms in completions:
        bins.setdefault(int((t - start) / BIN), []).append(ms)
    xs = sorted(bins)
    fig, ax = plt.subplots(figsize=(9, 3.4))
    ax.plot([x * BIN for x in xs], [len(bins[x]) / BIN for x in xs], color="#4c72b0", label="runs completed/s")
    ax.set_xlabel("seconds since the first completion")
    ax.set_ylabel("runs completed per second")
    ax2 = ax.twinx()
    medians = [statistics.median(bins[x]) for x in xs]
    ax2.plot([x * BIN for x in xs], medians, color="#55a868", alpha=0.8, label="median run latency")
    ax2.set_ylabel("median run latency, ms")
    seen: set[str] = set()
    for a, b, kind in faults:
        key = next((k for k in BAND_COLOURS if kind.startswith(k)), "takeover")
        label = None if key in seen else key
        ax.axvspan(a - start, max(b, a + 0.05) - start, color=BAND_COLOURS[key], alpha=0.25, label=label)
        seen.add(key)
    ax.legend(loc="upper left", fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    result.chart(name, fig)
