"""Scenario 3, races: the four races of the v2 protocol with real separate sessions and proven
barriers, each permutation both ways, `repeat` times each, every attempt reported.

The specs are in `race_specs`; this module runs them and turns the results into evidence:
isolation-tester transcripts, the pg_locks rows that proved each wait, the checks, and timings.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import matplotlib.pyplot as plt

from evidence_lib.bundle.result import ScenarioResult
from evidence_lib.harness import RaceResult, run_race
from evidence_lib.pg.db import Server
from evidence_lib.scenarios import race_specs
from evidence_lib.scenarios.support.setup import modes, scenario_database, scenario_server

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
    with result.capture_logs(), scenario_server(database_url) as server:
        for race in race_specs.all_races(tuple(modes(queue_modes))):
            outcome = run_race(race, _databases(server, hooks), repeat=repeat, timeout=timeout)
            _record(result, outcome)
    _chart(result)
    return result


def _databases(server: Server, hooks: str) -> Callable[[], AbstractContextManager[str]]:
    @contextmanager
    def database() -> Iterator[str]:
        with scenario_database(server, hooks=hooks, prefix="race") as url:
            yield url

    return database


def _record(result: ScenarioResult, outcome: RaceResult) -> None:
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
    proven = all(any(s.waited for s in r.steps) for r in outcome.runs)
    result.gate(
        outcome.race.split("[")[0],
        outcome.passed and proven,
        f"{len(outcome.runs) - len(failed)}/{len(outcome.runs)} permutation runs passed, "
        f"every one with a wait proven in pg_locks: {proven}",
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
