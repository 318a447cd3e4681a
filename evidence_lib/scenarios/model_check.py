"""Scenario 11: model-based checking. Random histories of every v2 operation (and v1 calls on v2
rows, poison, lost acknowledgements through the real proxy, the test clock, two-session races)
run against the real database and are compared, answer by answer and table by table, with the
reference model (`model`). The candidate must give no counterexample; then every SQL
mutant of the negative-controls catalogue runs through the same check, and the kill count is
reported beside the gates (the worker seams are not in the model's reach: it calls SQL). Beside
the model, the SQL probes with golden transcripts (`scenarios.regress`) pin what no history reaches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from concurrent import futures
from typing import Any

from evidence_lib import progress
from evidence_lib.engine.flows import QueueMode
from evidence_lib.model.bench import Bench
from evidence_lib.model.check import CheckResult, Counterexample, check, machine_for, run_tour
from evidence_lib.mutation.apply import apply_sql
from evidence_lib.mutation.catalogue import catalogue
from evidence_lib.mutation.catalogue.probes import killed_by_a_probe
from evidence_lib.mutation.controls import Control
from evidence_lib.pg import db
from evidence_lib.pg.db import Server, connect
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios import regress
from evidence_lib.scenarios.support.parts import Databases, PartSpec, clones, migrated_template, run_part
from evidence_lib.scenarios.support.setup import scenario_server

SCENARIO = "11_model_check"
SEED = 20261203
PROBE_JOBS = 4  # SQL probes run at once


def run(
    examples: int = 40,
    steps: int = 40,
    seed: int = SEED,
    mutant_examples: int = 8,
    mutants: str = "",
    database_url: str = "",
) -> ScenarioResult:
    result = ScenarioResult(
        SCENARIO,
        "Model-based checking: random histories against a reference model, on the real database",
        {"examples": examples, "steps": steps, "seed": seed, "mutant_examples": mutant_examples, "mutants": mutants},
    )
    with result.capture_logs(), scenario_server(database_url) as server, migrated_template(server, prefix="mc") as t:
        progress.report(f"candidate: {examples} histories")
        outcome = check(server, t, examples=examples, steps=steps, seed=seed)
        _candidate(result, outcome)
        _probes(result, clones(server, t, prefix="mcr"))
        chosen = [
            m
            for m in catalogue()
            if m.seam is None and not killed_by_a_probe(m) and (not mutants or m.name in mutants.split(","))
        ]
        for i, mutant in enumerate(chosen):
            progress.report(f"mutant {mutant.name}", i, len(chosen), unit="mutants")
            with _patched(server, t, mutant) as template:
                found = check(server, template, examples=mutant_examples, steps=steps, seed=seed, shrink=False)
            result.append_rows("mutants", [_mutant_row(mutant, found)])
        killed = sum(1 for r in result.tables["mutants"].to_dict("records") if r["killed"]) if chosen else 0
        result.headline = f"model check: {killed} of {len(chosen)} SQL mutants killed"
        result.notes.insert(0, result.headline)
    return result


@contextlib.contextmanager
def _patched(server: Server, template: str, mutant: Control) -> Iterator[str]:
    """A clone of the candidate with the mutant's SQL patch applied, to clone histories from."""
    with db.scratch_database(server, template=template, prefix="mcm") as url:
        with connect(url, application_name="patch") as conn:
            apply_sql(conn, mutant.mutant())
        yield db.database_name(url)


def _probes(result: ScenarioResult, databases: Databases) -> None:
    """The SQL probes with golden transcripts (`scenarios.regress`), each on a fresh clone, four at
    a time (their transcripts are proven by locks, not timed: stable side by side); recorded in
    order."""
    specs = regress.parts()
    progress.report("SQL probes", 0, len(specs), unit="probes")
    subs = [ScenarioResult(result.scenario, spec.name, {}) for spec in specs]
    with futures.ThreadPoolExecutor(PROBE_JOBS, thread_name_prefix="probe") as pool:
        list(pool.map(lambda pair: run_part(pair[0], pair[1], databases, None), zip(subs, specs, strict=True)))
    for spec, sub in zip(specs, subs, strict=True):
        for gate in sub.gates:
            result.gate(gate.name, gate.passed, gate.detail, gate.mode, gate.point)
        result.escaped += sub.escaped
        result.append_rows("sql_probes", [{"probe": spec.name, "passed": all(g.passed for g in sub.gates)}])


def _candidate(result: ScenarioResult, outcome: CheckResult) -> None:
    bench = outcome.bench
    result.table("summary", [{
        "histories": bench.histories, "operations": bench.steps, "two_session_races": bench.races,
        "seconds": round(outcome.seconds, 1), "seed": outcome.settings["seed"],
        "max_steps_per_history": outcome.settings["steps"], "examples_asked": outcome.settings["examples"],
    }])  # fmt: skip
    result.table(
        "coverage",
        [
            {"state of the run before": state, "operation": op, "answer": answer, "times": n}
            for (state, op, answer), n in sorted(bench.coverage.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2]))
        ],
    )
    ce = outcome.counterexample or outcome.tour
    result.table("counterexample", [{"step": i + 1, "operation": line} for i, line in enumerate(ce.transcript)]
                 + [{"step": len(ce.transcript) + 1, "operation": f"FAILED: {ce.error}"}] if ce else [])  # fmt: skip
    if ce:
        result.notes.append(f"counterexample (replay with seed {ce.seed}):\n{ce.text()}")
    tour_gate(result, outcome.tour)
    random_gate(result, outcome)


def tour_gate(result: ScenarioResult, tour: Counterexample | None, mode: str = "") -> None:
    result.gate(
        "the_tour_of_every_operation_agrees_with_the_model",
        tour is None,
        "a scripted history ran every operation, refusal and fault the model knows"
        if tour is None else f"{tour.error[:400]} (after {len(tour.transcript)} operations)",
        mode,
    )  # fmt: skip


def random_gate(result: ScenarioResult, outcome: CheckResult) -> None:
    bench, ce, tour = outcome.bench, outcome.counterexample, outcome.tour
    ran = f"{bench.histories} histories, {bench.steps} operations, {bench.races} two-session races"
    result.gate(
        "no_counterexample_in_random_histories",
        ce is None and tour is None,
        "not run: the tour already disagreed" if tour is not None else
        f"{ran}, seed {outcome.settings['seed']}" if ce is None else f"seed {ce.seed}: {ce.error[:400]}",
    )  # fmt: skip


# The same two gates as parts, for the negative controls (scenarios.support.targets.PARTS): the tour
# in one queue mode, and a short seeded run of random histories without the tour.
CONTROL_EXAMPLES = 12


def _tour_part(result: ScenarioResult, databases: Databases, mode: QueueMode) -> None:
    tour_gate(result, run_tour(machine_for(Bench(databases.server, databases.template)), (mode,)), mode)


def _random_part(result: ScenarioResult, databases: Databases, mode: QueueMode) -> None:
    random_gate(result, check(databases.server, databases.template, examples=CONTROL_EXAMPLES, steps=40,
                              seed=SEED, shrink=False, tour_first=False))  # fmt: skip


PARTS = [PartSpec("tour", _tour_part), PartSpec("random_histories", _random_part, per_mode=False), *regress.parts()]


def _mutant_row(mutant: Control, found: CheckResult) -> dict[str, Any]:
    ce = found.tour or found.counterexample
    return {
        "mutant": mutant.name,
        "killed": ce is not None,
        "killed_by": "" if ce is None else "the tour" if found.tour else "a random history",
        "histories_run": found.bench.histories,
        "operations": found.bench.steps,
        "seconds": round(found.seconds, 1),
        "failing_operation": (ce.transcript[-1] if ce and ce.transcript else "") if ce else "",
        "why": (ce.error.split(":", 1)[-1].strip()[:240] if ce else "survived: no history broke the model"),
    }
