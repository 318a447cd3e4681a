"""Scenario 3, races: the four races of the v2 protocol with real separate sessions and proven
barriers, each permutation both ways, `repeat` times each, every attempt reported.

The specs are in `race_specs`; this module runs them and turns the results into evidence:
isolation-tester transcripts, the pg_locks rows that proved each wait, the checks, and timings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import matplotlib.pyplot as plt

from evidence_lib.bundle.result import ScenarioResult
from evidence_lib.engine.flows import QueueMode
from evidence_lib.harness import Race, RaceContext, RaceResult, run_race
from evidence_lib.harness.transcript import PermutationRun
from evidence_lib.scenarios import race_specs
from evidence_lib.scenarios.support import consistency
from evidence_lib.scenarios.support.parts import Databases, Part, PartSpec, candidate_databases, run_parts
from evidence_lib.scenarios.support.setup import modes, scenario_server

SCENARIO = "03_races"


def run(
    queue_modes: str = "flow,step",
    repeat: int = 1,
    database_url: str = "",
    hooks: str = "",
    timeout: float = 10.0,
) -> ScenarioResult:
    result = ScenarioResult(
        SCENARIO, "Races with proven barriers", {"queue_modes": queue_modes, "repeat": repeat, "hooks": hooks}
    )
    with (
        result.capture_logs(),
        scenario_server(database_url) as server,
        candidate_databases(server, hooks=hooks, prefix="race") as databases,
    ):
        run_parts(result, parts(repeat, timeout), databases, modes(queue_modes))
    consistency.gates(result)
    _chart(result)
    return result


def parts(repeat: int = 1, timeout: float = 10.0) -> list[PartSpec]:
    """One part per race: every permutation `repeat` times, each on a fresh database."""
    return [PartSpec(make.__name__, _race_part(make, repeat, timeout)) for make in race_specs.ALL]


def _race_part(make: Callable[[QueueMode], Race], repeat: int, timeout: float) -> Part:
    def part(result: ScenarioResult, databases: Databases, mode: QueueMode) -> None:
        def inspect(ctx: RaceContext, run: PermutationRun) -> None:
            with ctx.connect() as conn:
                consistency.check(result, conn, mode, f"{run.race} / {run.permutation} #{run.attempt}")

        outcome = run_race(make(mode), databases, repeat=repeat, timeout=timeout, inspect=inspect)
        record(result, outcome)

    return part


def contention(run: PermutationRun) -> list[dict[str, Any]]:
    """The waits of a permutation on a lock that another race session held (a transactionid,
    tuple or row lock), as opposed to the controller's hook barrier."""
    return [
        row
        for row in run.lock_rows
        if row["locktype"] != "advisory" and row["blocked_by"] and "controller" not in row["blocked_by"]
    ]


def record(result: ScenarioResult, outcome: RaceResult) -> None:
    result.transcripts.append(outcome.transcript())
    mode = outcome.race.split("[")[-1].rstrip("]")
    runs, checks, steps, locks = [], [], [], []
    for r in outcome.runs:
        runs.append(
            {
                "race": outcome.race,
                "permutation": r.permutation,
                "attempt": r.attempt,
                "passed": r.passed,
                "waits_proven": sum(1 for s in r.steps if s.waited),
                "seconds": round(r.seconds, 3),
                "error": r.error,
            }
        )
        checks += [
            {
                "race": outcome.race,
                "permutation": r.permutation,
                "attempt": r.attempt,
                "check": c.name,
                "passed": c.passed,
                "detail": c.detail,
            }
            for c in r.checks
        ]
        steps += [
            {
                "race": outcome.race,
                "permutation": r.permutation,
                "attempt": r.attempt,
                "step": s.name,
                "waited": s.waited,
                "ms": round(s.seconds * 1000, 2),
                "outcome": s.outcome,
            }
            for s in r.steps
        ]
        locks += [
            {"race": outcome.race, "permutation": r.permutation, "attempt": r.attempt, **row} for row in r.lock_rows
        ]
    result.append_rows("permutations", runs)
    result.append_rows("checks", checks)
    result.append_rows("steps", steps)
    result.append_rows("lock_proofs", locks)
    failed = outcome.failures()
    barrier = all(
        any(row["locktype"] == "advisory" and "controller" in row["blocked_by"] for row in r.lock_rows)
        for r in outcome.runs
    )
    name = outcome.race.split("[")[0]
    result.gate(
        name,
        outcome.passed and barrier,
        f"{len(outcome.runs) - len(failed)}/{len(outcome.runs)} permutation runs passed, "
        f"every one parked at its hook barrier (advisory lock held by the controller): {barrier}",
        mode,
    )
    contended = [(r, contention(r)) for r in outcome.runs]
    proofs = [
        f"{r.permutation}: {w[0]['step']} (pid {w[0]['pid']}) waited on {w[0]['locktype']} "
        f"{w[0]['transactionid'] or w[0]['relation'] or ''} held by {w[0]['blocked_by'][0]} "
        f"(pid {w[0]['blocked_by_pids'][0]})"
        for r, w in contended
        if w
    ]
    result.gate(
        f"{name}_contention_proven",
        bool(contended) and all(w for _, w in contended),
        f"{len(proofs)}/{len(contended)} permutation runs proved a wait on another session's lock in "
        f"pg_locks / pg_blocking_pids: " + "; ".join(proofs[:2]),
        mode,
    )


def _chart(result: ScenarioResult) -> None:
    frame = result.tables.get("steps")
    if frame is None or frame.empty:
        return
    fig, ax = plt.subplots(figsize=(9, 4))
    labels, data = [], []
    for (race, perm), group in frame.groupby(["race", "permutation"]):
        labels.append(f"{race} / {perm}")
        data.append(group["ms"].tolist())
    ax.boxplot(data, vert=False)
    ax.set_yticks(range(1, len(labels) + 1), labels, fontsize=7)
    ax.set_xlabel("step latency, ms (waits included), all repeats")
    ax.set_title("Races: per-step latency")
    fig.tight_layout()
    result.chart("step_latency", fig)
