"""Scenario 12, mutation analysis: defects generated from the engine's own code (and the workers'),
each judged by the evidence, with a score in every bundle.

The mutants come from `evidence_lib.mutation` (pglast over `sql/`, Python's `ast` over
`evidence_lib/workers`); each is judged by the oracle chain: coverage, the model oracle in one
session, then the scenario parts that execute what it changes (this layer hands them in). The
bundle carries `mutation.json` in the shared mutation-testing report schema.

In `make evidence` the run is a deterministic sample seeded by the revision, plus every mutant of
the objects changed since `since` (a pull request's base); `make mutation` runs the full sweep.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from evidence_lib import progress
from evidence_lib.mutation import report, select
from evidence_lib.mutation.history import DEFAULT
from evidence_lib.mutation.report import Metrics
from evidence_lib.mutation.sweep import Settings, Sweep, plan
from evidence_lib.mutation.sweep import run as sweep_run
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.support.parts import migrated_template
from evidence_lib.scenarios.support.setup import scenario_server

SCENARIO = "12_mutation"
# the targets of issue 25, reported as measurements (a miss is shown, in red, not a failed run)
TARGETS = {"sql": 95.0, "sql per function": 90.0, "python": 90.0, "model share": 80.0}


def _revision() -> str:
    import subprocess

    from evidence_lib import PROJECT_ROOT

    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def run(
    sample: int = 20,
    since: str = "",
    full: bool = False,
    objects: str = "",
    jobs: int = 0,
    oracle_examples: int = 2,
    parts_oracle: bool = True,
    history: bool = True,
    database_url: str = "",
    bundle_dir: str = "",
) -> ScenarioResult:
    """Judge the mutants of this run; `full` judges every one (the sample and `since` then ignored)."""
    params = {
        "sample": sample,
        "since": since,
        "full": full,
        "objects": objects,
        "jobs": jobs,
        "oracle_examples": oracle_examples,
        "parts_oracle": parts_oracle,
        "history": history,
    }
    result = ScenarioResult(SCENARIO, "Mutation analysis: generated defects judged by the evidence", params)
    revision = _revision()
    settings = Settings(
        jobs=jobs or os.cpu_count() or 1,
        # a bundle runs other scenarios beside this one: one part per job, as before --part-jobs
        # (twice as many overloaded two cores into Timeouts that depend on the load)
        part_jobs=jobs or os.cpu_count() or 1,
        since="" if full else since,
        sample=None if full or objects else sample,
        objects=tuple(o for o in objects.split(",") if o),
        examples=oracle_examples,
        history=DEFAULT if history else None,
        coverage_folder=Path(bundle_dir) / "coverage" if bundle_dir else None,
        parts_oracle=parts_oracle,
    )
    with result.capture_logs(), scenario_server(database_url) as server, migrated_template(server, prefix="mu") as t:
        chosen = plan(settings, revision)
        progress.report(f"{len(chosen)} mutants ({settings.describe(revision)})")
        sweep = sweep_run(server, t, revision, settings, chosen)
    record(result, sweep)
    if bundle_dir:
        dropped = sweep.generated.dropped()
        Path(bundle_dir).mkdir(parents=True, exist_ok=True)
        (Path(bundle_dir) / "mutation.json").write_text(json.dumps(report.to_report(sweep, dropped=dropped), indent=1))
    return result


def headline(m: Metrics, mode: str) -> str:
    return (f"mutation score: {m.detected} of {m.valid} ({m.ignored} equivalent, {m.compile_errors} not compiling, "
            f"{m.runtime_errors} runtime errors, {m.timeout} timeouts; {mode})")  # fmt: skip


def record(result: ScenarioResult, sweep: Sweep) -> None:
    """Tables, gates, targets and the headline of one sweep."""
    outcomes = sweep.outcomes
    everything = Metrics.of(o.verdict.status for o in outcomes)
    sql = Metrics.of(o.verdict.status for o in outcomes if o.mutant.kind == "sql")
    python = Metrics.of(o.verdict.status for o in outcomes if o.mutant.kind == "python")
    detected = [o for o in outcomes if o.verdict.status in ("Killed", "Timeout")]
    by_model = sum(1 for o in detected if o.verdict.by.startswith("model"))
    result.headline = headline(everything, sweep.mode)
    result.notes.insert(0, result.headline)
    gen = sweep.generated
    result.table("summary", [{
        "mode": sweep.mode, "revision": sweep.revision[:12], "generated": len(gen.mutants),
        "dropped: same parse tree as the original": len(gen.equivalent), "dropped: duplicates": len(gen.duplicates),
        "dropped: fields of the frozen envelope with one value": len(gen.frozen_equal),
        "judged": sweep.selected, "verdicts reused": sweep.reused, "seconds": round(sweep.seconds, 1),
        "detected by the model": by_model, "detected": everything.detected,
    }])  # fmt: skip
    result.table("scores", [{"mutants": "SQL", **sql.row()}, {"mutants": "Python", **python.row()},
                            {"mutants": "all", **everything.row()}])  # fmt: skip
    result.table("by_object", report.by_key(sweep, "obj"))
    result.table("by_family", report.by_key(sweep, "family"))
    result.table("by_operator", report.by_key(sweep, "operator"))
    result.table("survivors", report.survivors(sweep))
    result.table("timeouts", [{"id": o.mutant.id, "object": o.mutant.obj, "operator": o.mutant.operator,
                               "by": o.verdict.by, "why": o.verdict.detail}
                              for o in outcomes if o.verdict.status == "Timeout"])  # fmt: skip
    result.table("errors", [{"id": o.mutant.id, "object": o.mutant.obj, "status": o.verdict.status,
                             "why": o.verdict.detail}
                            for o in outcomes if o.verdict.status in ("RuntimeError", "CompileError")])  # fmt: skip
    result.table("candidate", [{"part": p.label, "seconds": p.seconds, "gates green": len(p.green),
                                "gates red": len(p.red), "red": ", ".join(p.red[:3])}
                               for p in sweep.coverage.parts])  # fmt: skip
    result.table("phases", [{"phase": k, "seconds": round(v, 1)} for k, v in sweep.phases.items()])
    broken = [o for o in outcomes if o.verdict.status == "RuntimeError" and o.verdict.by == "the sweep"]
    first = f"{broken[0].mutant.label}: {broken[0].verdict.detail}" if broken else ""
    result.gate("the_sweep_judged_every_mutant", not broken,
                f"{len(outcomes)} verdicts" if not broken else f"{len(broken)} broke the sweep: {first}")  # fmt: skip
    result.gate("the_candidate_agrees_with_every_oracle", sweep.candidate_agrees,
                "the candidate agrees with the model in every job and is green in every part this sweep ran on it"
                if sweep.candidate_agrees else "; ".join(sweep.candidate_problems)[:1500])  # fmt: skip
    result.gate("no_argued_equivalent_is_stale", not sweep.stale_equivalents,
                "every id in equivalents.toml is a mutant of this revision" if not sweep.stale_equivalents
                else f"argued but no longer generated: {', '.join(sweep.stale_equivalents)}")  # fmt: skip
    _targets(result, sweep, sql, python, by_model, everything.detected)


def _targets(result: ScenarioResult, sweep: Sweep, sql: Metrics, python: Metrics, by_model: int, detected: int) -> None:
    rows: list[dict[str, Any]] = []

    def target(name: str, value: float, goal: float, unit: str = "%") -> None:
        rows.append({"target": name, "measured": round(value, 1), "goal": f">= {goal:g} {unit}",
                     "met": value >= goal})  # fmt: skip

    if sql.valid:
        target("SQL mutants detected (non-equivalent)", sql.score, TARGETS["sql"])
        per_function = [r for r in report.by_key(sweep, "obj") if str(r["object"]).startswith("function ")]
        worst = min((r["score %"] for r in per_function if r["mutants"]), default=100.0)
        target("the weakest engine function", worst, TARGETS["sql per function"])
    if python.valid:
        target("Python mutants detected", python.score, TARGETS["python"])
    if detected:
        target("share of detections made by the model alone", 100.0 * by_model / detected, TARGETS["model share"])
    result.table("targets", rows)
    missed = [r["target"] for r in rows if not r["met"]]
    result.targets_missed = missed


def shard_of(text: str) -> select.Shard | None:
    return select.Shard.parse(text) if text else None
