"""Scenario 10, negative controls: the suite proves that its gates can turn red.

For each mutant of the catalogue: a scratch database cloned from the migrated candidate with
the mutant's patch applied on top (as a real change would ship), and, for each part the
mutant targets, the very part the scenario notebooks run (not a copy), on clones of that
database. A mutant is killed when a gate of its targets turns red, and every gate it names
must be among them; the candidate runs the same parts and stays green. Each target runs under
a deadline of seconds: a mutant that makes a part hang is cut off (its sessions terminated)
and reported as killed by the deadline, never left to a notebook's cell timeout.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent import futures

from evidence_lib import progress
from evidence_lib.mutation.apply import apply_sql, swapped
from evidence_lib.mutation.catalogue import catalogue
from evidence_lib.mutation.catalogue.probes import killed_by_a_probe
from evidence_lib.mutation.controls import Control, Target
from evidence_lib.mutation.judging import TargetRun
from evidence_lib.pg import db
from evidence_lib.pg.db import Server, connect
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.support.parts import migrated_template
from evidence_lib.scenarios.support.setup import scenario_server
from evidence_lib.scenarios.support.targets import run_target

SCENARIO = "10_negative_controls"
PROBE_JOBS = 4  # probe controls judged at once (a probe mostly waits on a lock timeout)


@contextlib.contextmanager
def mutant_template(server: Server, candidate: str, control: Control) -> Iterator[str]:
    """A clone of the candidate template with the control's patch applied; yields its name."""
    with db.scratch_database(server, template=candidate, prefix="nc_mut") as url:
        with connect(url, application_name="mutant") as conn:
            apply_sql(conn, control.mutant())
        yield db.database_name(url)


def _label(target: Target) -> str:
    return target.label


def run(mutants: str = "", deadline: float = 30.0, database_url: str = "") -> ScenarioResult:
    """Run the candidate and every control (or those named in `mutants`, comma-separated)."""
    chosen = [m for m in catalogue() if not mutants or m.name in {n.strip() for n in mutants.split(",")}]
    result = ScenarioResult(SCENARIO, "Negative controls", {"mutants": mutants, "deadline": deadline})
    with (
        result.capture_logs(),
        scenario_server(database_url) as server,
        migrated_template(server, prefix="nc_cand") as candidate,
    ):
        if server.control is None:  # a DATABASE_URL server: no target may crash it
            skipped = [m.name for m in chosen if m.needs_owned_server]
            chosen = [m for m in chosen if not m.needs_owned_server]
            if skipped:
                result.notes.append(
                    f"not run, the server is not this suite's to crash (DATABASE_URL): {', '.join(skipped)}"
                )
        targets = list({_label(t): t for m in chosen for t in m.targets}.values())
        for i, target in enumerate(targets):
            progress.report(f"candidate in {_label(target)}", i, len(targets), unit="targets")
            run_ = run_target(server, candidate, target, deadline, f"c{i}")
            result.append_rows("candidate", [_target_row("candidate", run_)])
            result.gate(
                f"candidate_is_green_in_{target.scenario}_{target.part}",
                not run_.red and bool(run_.gates),
                f"{len(run_.gates)} gates, red: {', '.join(run_.red) or 'none'} ({run_.seconds:.1f} s)",
                target.mode or "",
            )
        # the controls a SQL probe kills (hundreds, each a probe on one clone, mostly waiting on a
        # lock timeout) are judged four at a time once the others are done (those run one at a
        # time, as their parts were written to, and a Python mutant is swapped in process-wide;
        # none of them shares the machine with the probes). Recorded in catalogue order.
        probed = [i for i, m in enumerate(chosen) if killed_by_a_probe(m)]
        judged: dict[int, tuple[list[TargetRun], float]] = {}
        for i, mutant in enumerate(chosen):
            if not killed_by_a_probe(mutant):
                progress.report(f"mutant {mutant.name}", len(judged), len(chosen), unit="mutants")
                judged[i] = _judge(server, candidate, mutant, deadline, f"m{i}")
        with futures.ThreadPoolExecutor(PROBE_JOBS, thread_name_prefix="nc-probe") as pool:
            pending = {i: pool.submit(_judge, server, candidate, chosen[i], deadline, f"m{i}") for i in probed}
            for i in probed:
                judged[i] = pending[i].result()
                progress.report(f"mutant {chosen[i].name}", len(judged), len(chosen), unit="mutants")
        for i, mutant in enumerate(chosen):
            _record(result, mutant, *judged[i])
    killed = sum(1 for g in result.gates if g.name.startswith("mutant_") and g.passed)
    result.headline = f"negative controls: {killed} of {len(chosen)} killed"
    result.notes.insert(0, result.headline)
    return result


def _judge(server: Server, candidate: str, mutant: Control, deadline: float, tag: str) -> tuple[list[TargetRun], float]:
    """Run the control's targets on a clone of the candidate with its patch: the runs, the seconds."""
    started = time.perf_counter()
    runs: list[TargetRun] = []
    if killed_by_a_probe(mutant):  # the patch on the probe's own clone
        patch = mutant.mutant().patch
        runs = [
            run_target(server, candidate, t, deadline, f"{tag}t{j}", patch=patch) for j, t in enumerate(mutant.targets)
        ]
        return runs, time.perf_counter() - started
    with mutant_template(server, candidate, mutant) as template, swapped(mutant.mutant()):
        for j, target in enumerate(mutant.targets):
            runs.append(run_target(server, template, target, deadline, f"{tag}t{j}"))
    return runs, time.perf_counter() - started


def _record(result: ScenarioResult, mutant: Control, runs: list[TargetRun], seconds: float) -> None:
    red = [f"{_label(r.target)}: {name}" for r in runs for name in r.red]
    missing = [f"{_label(r.target)}: {name}" for r in runs for name in r.missing]
    verdict = "survived" if not red else ("killed" if not missing else "killed, but not by its expected gate")
    result.append_rows(
        "mutants",
        [
            {
                "mutant": mutant.name,
                "breaks": mutant.breaks,
                "verdict": verdict,
                "red_gates": "; ".join(red),
                "expected_red": "; ".join(f"{_label(t)}: {', '.join(t.gates)}" for t in mutant.targets),
                "expected_but_green": "; ".join(missing),
                "deadline_hit": any(r.deadline_hit for r in runs),
                "seconds": round(seconds, 1),
            }
        ],
    )
    result.append_rows("patches", [{"mutant": mutant.name, "patch": mutant.mutant().replacement}])
    result.append_rows("target_runs", [_target_row(mutant.name, r) for r in runs])
    result.gate(
        f"mutant_{mutant.name}_killed",
        bool(red) and not missing,
        f"{verdict}: red {', '.join(red[:4]) or 'nothing'}"
        + (f"; expected red but green: {', '.join(missing)}" if missing else "")
        + (" (cut off by the deadline)" if any(r.deadline_hit for r in runs) else ""),
    )


def _target_row(subject: str, run_: TargetRun) -> dict[str, object]:
    return {
        "subject": subject,
        "target": _label(run_.target),
        "gates": len(run_.gates),
        "red": ", ".join(run_.red),
        "seconds": round(run_.seconds, 2),
        "deadline_hit": run_.deadline_hit,
    }
