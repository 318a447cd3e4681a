"""Scenario 7, performance, continued: throughput at scale (issue 26).

Worker pools side by side on one server, interleaved: for each repetition, each worker count,
each system in an order rotated per repetition (raw PGMQ, the anchor's protocol, v1, v2 with
wake-ups, v2 polling), each on a fresh clone. Medians per (system, workers). Then end-to-end
A -> B latency one run at a time and at half of peak, and the queries an idle pool sends. Every
figure lands in tables, charts and `perf.json`; the targets of issue 26 are measurements shown as
met or missed, never gates. The gates: every case did work without errors.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from evidence_lib import progress
from evidence_lib.bench import anchor, intervals, pools
from evidence_lib.bench.pools import System
from evidence_lib.bench.throughput import Throughput, raw_pgmq
from evidence_lib.errors import BadInput
from evidence_lib.pg import db, migrate
from evidence_lib.pg.db import Server, connect
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios import performance_charts

Case = str  # "raw" or a pool System
CASES: tuple[Case, ...] = ("raw", *pools.SYSTEMS)
LONE = ("v2", "anchor", "v1")


def percentiles(values: list[float]) -> dict[str, float | None]:
    """p50/p95/p99 (nearest rank); an infinite value (a run that never completed) stays in."""
    if not values:
        return {"p50": None, "p95": None, "p99": None}
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]

    return {f"p{p}": rank(p) for p in (50, 95, 99)}


class Templates:
    """The migrated candidate and, when npm can fetch it, the anchor installed: clones per case."""

    def __init__(self, server: Server, anchor_version: str) -> None:
        self.server = server
        self.candidate = db.create_database(server, db.scratch_name("perf_tpl"))
        migrate.apply_migrations(self.candidate)
        self.anchor: str | None = None
        self.anchor_note = ""
        try:
            fetched = anchor.fetch(anchor_version)
            self.anchor = db.create_database(server, db.scratch_name("perf_anchor_tpl"))
            anchor.install(self.anchor, fetched)
        except anchor.AnchorUnavailable as exc:
            self.anchor_note = str(exc)
            if self.anchor:
                db.drop_database(server, db.database_name(self.anchor))
                self.anchor = None

    @contextlib.contextmanager
    def clone(self, case: Case) -> Iterator[str | None]:
        template = self.anchor if case == "anchor" else self.candidate
        if template is None:
            yield None
            return
        with db.scratch_database(self.server, template=db.database_name(template), prefix="perf") as url:
            yield url

    def close(self) -> None:
        for url in (self.candidate, self.anchor):
            if url:
                db.drop_database(self.server, db.database_name(url))


def _measure(server: Server, url: str, case: Case, workers: int, seconds: float) -> Throughput:
    if case == "raw":
        return raw_pgmq(server, url, workers, seconds, warmup=1.0)
    system: System = case  # type: ignore[assignment]
    return pools.pool_runs(server, url, system, workers, seconds)


def _window_latency(url: str, case: Case, t: Throughput) -> dict[str, float | None]:
    if case == "raw":
        return percentiles([])
    since, until = t.extra["window"]
    with connect(url) as conn:
        found = conn.execute(
            f"select extract(epoch from completed_at - started_at) * 1000 from {pools.runs_table(case)} "  # type: ignore[arg-type]
            "where completed_at between %s and %s",
            (since, until),
        ).fetchall()
    return percentiles([float(ms) for (ms,) in found])


def _sample(rep: int, case: Case, n: int, t: Throughput, latency: dict[str, float | None]) -> dict[str, Any]:
    """One measurement: throughput, latency at peak, and what each unit cost (client and server
    CPU, round trips, and from the WAL and wait-event sampling: commits, row locks, lock waits)."""
    costs = t.extra["costs"]
    pieces = t.extra["piece_rates"]
    spread = (max(pieces) - min(pieces)) / statistics.median(pieces) if len(pieces) > 1 and min(pieces) > 0 else None
    client = t.extra["client_cpu_s"] * 1000 / t.units if t.units else None
    return {
        "repetition": rep, "system": case, "workers": n, "units_per_s": t.per_second,
        "round_trips_per_unit": t.round_trips_per_unit, "server_cpu_ms_per_unit": t.cpu_ms_per_unit,
        "client_cpu_ms_per_unit": client, **costs.per_unit(t.units),
        "latency_p50_ms": latency["p50"], "latency_p95_ms": latency["p95"], "latency_p99_ms": latency["p99"],
        "warmup_s": round(t.extra["warmup_s"], 2), "steady": t.extra["steady"],
        "window_spread": None if spread is None else round(spread, 3),
        "errors": "; ".join(t.extra["errors"]), "units": t.units, "costs_note": costs.note,
    }  # fmt: skip


def measure_pools(
    result: ScenarioResult,
    server: Server,
    templates: Templates,
    counts: list[int],
    seconds: float,
    repetitions: int,
    budget: float = 0.0,
    cases: tuple[Case, ...] = CASES,
) -> list[dict[str, Any]]:
    """Every case at every worker count, interleaved, `repetitions` times; then, while `budget`
    seconds are not spent, more repetitions as long as a ratio's 95 % interval is wider than
    +-10 % (`bench.intervals.pool_ratios`). One row per measurement."""
    samples: list[dict[str, Any]] = []
    started, rep, longest = time.monotonic(), 0, 0.0
    while rep < repetitions or (
        time.monotonic() - started + longest <= budget  # the next repetition fits in what is left
        and not all(r["precise"] for r in intervals.pool_ratios(samples))
    ):
        began = time.monotonic()
        total = max(repetitions, rep + 1) * len(counts) * len(cases)
        for n in counts:
            # rotated each repetition and reversed every other one, so no system always follows
            # the same one (what a case leaves behind, a dropped database, a checkpoint, lands on
            # a different system each time)
            order = cases[rep % len(cases):] + cases[: rep % len(cases)]  # fmt: skip
            order = order[::-1] if rep % 2 else order
            for case in order:
                progress.report("worker pools, interleaved", len(samples), total, unit="cases")
                with templates.clone(case) as url:
                    if url is None:
                        continue
                    t = _measure(server, url, case, n, seconds)
                    latency = _window_latency(url, case, t)
                samples.append(_sample(rep, case, n, t, latency))
                result.gate(
                    "every pool case did work without errors",
                    t.units > 0 and not t.extra["errors"],
                    f"{case} at {n}: {t.units} {t.unit} in {t.seconds:.1f} s; errors: {t.extra['errors'][:2]}",
                    point=f"{case}@{n}#{rep}",
                )
        longest = max(longest, time.monotonic() - began)
        rep += 1
    return samples


def _median(values: list[Any]) -> float | None:
    clean = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(clean) if clean else None


MEDIANS = ("units_per_s", "round_trips_per_unit", "server_cpu_ms_per_unit", "client_cpu_ms_per_unit",
           "commits_per_unit", "wal_bytes_per_unit", "row_locks_per_unit", "rows_inserted_per_unit",
           "rows_updated_per_unit", "hot_update_share", "lock_wait_share", "latency_p50_ms", "latency_p95_ms",
           "latency_p99_ms", "window_spread")  # fmt: skip


def medians(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (system, workers): the median of each figure over the repetitions."""
    keys = sorted({(s["system"], s["workers"]) for s in samples}, key=lambda k: (CASES.index(k[0]), k[1]))
    out = []
    for system, n in keys:
        mine = [s for s in samples if (s["system"], s["workers"]) == (system, n)]
        row: dict[str, Any] = {"system": system, "workers": n, "repetitions": len(mine)}
        for key in MEDIANS:
            value = _median([s[key] for s in mine])
            row[key] = None if value is None else round(value, 2)
        out.append(row)
    return out


def latencies(server: Server, templates: Templates, peaks: dict[str, float], workers: int, runs: int,
              seconds: float) -> list[dict[str, Any]]:  # fmt: skip
    """End-to-end A -> B latency: one run at a time (1 worker), and paced at half of each
    system's peak at `workers` workers."""
    out: list[dict[str, Any]] = []
    for system in (s for s in LONE if s in peaks):
        progress.report(f"latency: {system}")
        with templates.clone(system) as url:
            if url is None:
                continue
            lone = percentiles(pools.lone_latencies(url, system, runs))  # type: ignore[arg-type]
        out.append({"system": system, "load": "one run at a time", "workers": 1, "rate_per_s": None,
                    **{f"{k}_ms": v for k, v in lone.items()}})  # fmt: skip
        rate = round(peaks.get(system, 0.0) / 2, 1)
        if rate <= 0:
            continue
        with templates.clone(system) as url:
            assert url is not None
            paced = pools.paced_latencies(url, system, workers, rate, seconds)  # type: ignore[arg-type]
        out.append({"system": system, "load": "half of peak", "workers": workers, "rate_per_s": rate,
                    "runs": len(paced), **{f"{k}_ms": v for k, v in percentiles(paced).items()}})  # fmt: skip
    return out


def idle(templates: Templates, workers: int, seconds: float, systems: tuple[System, ...]) -> list[dict[str, Any]]:
    out = []
    for system in systems:
        progress.report(f"idle pool: {system}")
        with templates.clone(system) as url:
            if url is None:
                continue
            cost = pools.idle_cost(url, system, workers, seconds)
        out.append({"system": system, "workers": workers, "seconds": round(cost.seconds, 1),
                    "client_round_trips": cost.client_calls,
                    "client_queries_per_s": round(cost.client_per_second, 2),
                    "server_transactions_per_s": round(cost.server_per_second, 2)})  # fmt: skip
    return out


def cases_of(spec: str, choices: tuple[Case, ...] = CASES, what: str = "pool_systems") -> tuple[Case, ...]:
    """"raw,anchor,v1,v2" -> the cases in `choices` order ("v2_polling" is "v2 polling"); an
    unknown name is refused (BadInput) with its name and the choices."""
    wanted = [w.strip().replace("_", " ") for w in spec.split(",") if w.strip()]
    unknown = [w for w in wanted if w not in choices]
    if unknown:
        raise BadInput(f"{what}: unknown system(s) {', '.join(unknown)}; choose among {', '.join(choices)}")
    return tuple(c for c in choices if c in wanted)


def idle_systems_of(spec: str) -> tuple[System, ...]:
    """The pools an idle run can watch (raw PGMQ has no idle pool): BadInput for anything else."""
    return tuple(s for s in pools.SYSTEMS if s in cases_of(spec, pools.SYSTEMS, "idle_systems"))


@dataclass(frozen=True)
class ScalePlan:
    """What the worker pools part measures (the bundle's budgeted plan, or `make perf`'s study)."""

    workers: str = "2,8"
    seconds: float = 1.0
    repetitions: int = 2
    budget: float = 0.0  # seconds the pools may spend, repeating until every ratio is precise
    systems: str = "raw,anchor,v1,v2"
    idle_systems: str = "v2"
    lone_runs: int = 30
    idle_seconds: float = 5.0


def run_scale(result: ScenarioResult, server: Server, plan: ScalePlan, anchor_version: str) -> None:
    """The pools, interleaved; then latency and idle cost (perf.json is written by `finish`)."""
    counts = [int(w) for w in plan.workers.split(",") if w.strip()]
    cases = cases_of(plan.systems)
    seconds = plan.seconds
    templates = Templates(server, anchor_version)
    try:
        if templates.anchor_note:
            result.notes.append(f"anchor pool not measured: {templates.anchor_note}")
        samples = measure_pools(result, server, templates, counts, seconds, plan.repetitions, plan.budget, cases)
        result.table("pools_samples", samples)
        table = result.table("pools", medians(samples)).to_dict("records")
        ratios = result.table("pool_ratios", intervals.pool_ratios(samples)).to_dict("records")
        wide = [f"{r['ratio']} at {r['workers']}: {r['shown']}" for r in ratios if not r["precise"]]
        if wide:
            result.notes.append(f"pool ratios wider than +-{intervals.PRECISION:.0%} after "
                                f"{max(r['pairs'] for r in ratios)} repetitions: " + "; ".join(wide))  # fmt: skip
        result.headline = "worker pools: " + "; ".join(
            f"{r['ratio']} at {r['workers']} {r['shown']}" for r in ratios if r["ratio"] != "v2 / raw bound")
        for note in sorted({s["costs_note"] for s in samples if s["costs_note"]}):
            result.notes.append(f"worker pools: {note}")
        top = max(counts)
        peaks = {r["system"]: r["units_per_s"] or 0.0 for r in table if r["workers"] == top}
        result.table("latency_end_to_end", latencies(server, templates, peaks, top, plan.lone_runs, seconds * 2))
        result.table("idle_pool", idle(templates, top, plan.idle_seconds, idle_systems_of(plan.idle_systems)))
    finally:
        templates.close()
    performance_charts.pool_charts(result)


def finish(result: ScenarioResult) -> None:
    """perf.json and the targets of issue 26, from every table the parts recorded."""
    doc = performance_charts.perf_document(result)
    result.table("scale_targets", doc["targets"])
    result.targets_missed += [f"{t['target']}: {t['measured']}" for t in doc["targets"] if t["met"] is False]
    result.document("perf.json", doc)
