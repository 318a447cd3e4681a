"""Running one scenario part against a database template (the candidate's or a mutant's), under a
deadline of seconds: the unit the negative controls and the mutation sweep judge a mutant with.

A part that hangs is cut off (its sessions terminated) and reported as the red gate
`finished_within_the_deadline`, never left to a notebook's cell timeout. The registry of parts
lives here, in the scenarios layer, so the mutation package (which imports no scenario) is handed
a runner instead of reaching for scenarios itself.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from evidence_lib.mutation.controls import Target
from evidence_lib.mutation.coverage import python_lines
from evidence_lib.mutation.judging import TargetRun
from evidence_lib.pg.db import Server
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios import (
    ab_proof,
    admission,
    model_check,
    queue_identity,
    races,
    reconciliation,
    response_loss,
    security,
)
from evidence_lib.scenarios.support import consistency, unit_tests
from evidence_lib.scenarios.support.parts import PartSpec, clones, run_part

PARTS: dict[str, Callable[[], list[PartSpec]]] = {
    "ab_proof": lambda: ab_proof.PARTS,
    "response_loss": lambda: response_loss.parts(repeat=1, crashes=("kill9",)),
    "races": lambda: races.parts(repeat=1),
    "reconciliation": lambda: reconciliation.PARTS,
    "queue_identity": lambda: queue_identity.PARTS,
    "admission": lambda: admission.PARTS,
    "security": lambda: security.PARTS,
    "model_check": lambda: model_check.PARTS,
}


def find_part(target: Target) -> PartSpec:
    for spec in PARTS[target.scenario]():
        if spec.name == target.part:
            return spec
    raise KeyError(f"scenario {target.scenario} has no part {target.part}")


def all_targets() -> list[Target]:
    """Every part of every scenario the sweep judges with, in each queue mode it runs in, and the
    project's tests of the worker code (`unit_tests`)."""
    out: list[Target] = []
    for scenario, parts in PARTS.items():
        for spec in parts():
            modes: tuple[str | None, ...] = ("flow", "step") if spec.per_mode else (None,)
            out += [Target(scenario, spec.name, (), mode) for mode in modes]  # type: ignore[arg-type]
    return out + unit_tests.targets()


def run_target(server: Server, template: str, target: Target, deadline: float, tag: str,
               coverage: bool = False, patch: str = "") -> TargetRun:  # fmt: skip
    """Run one target part on clones of `template` (each with `patch` applied, a mutant) within
    `deadline` seconds; with `coverage`, also record which engine functions its databases
    executed (`track_functions`) and which lines of the worker code ran (coverage.py)."""
    if unit_tests.is_unit_test(target):  # a Python mutant's part: nothing of the engine is patched
        return unit_tests.run_unit_test(server, template, target, deadline, tag, coverage=coverage)
    spec = find_part(target)
    sub = ScenarioResult(target.scenario, target.part, {})
    prefix = f"nc{tag}"
    databases = clones(server, template, prefix=prefix, coverage=coverage, patch=patch)
    started = time.perf_counter()

    def go() -> None:
        with sub.capture_logs(), databases.collecting():  # a part may read its own log lines
            run_part(sub, spec, databases, target.mode)

    worker = threading.Thread(target=go, name=f"target-{tag}", daemon=True)
    lines: dict[str, list[int]] = {}
    with python_lines() if coverage else contextlib.nullcontext(lines) as lines:
        worker.start()
        worker.join(deadline)
        hit = worker.is_alive()
    if hit:  # cut the part off: its sessions die, its calls raise, its thread ends
        terminate(server, prefix)
        worker.join(10)
        sub.gate("finished_within_the_deadline", False, f"still running after {deadline:.0f} s; sessions terminated")
    if consistency.TABLE in sub.tables:
        consistency.gates(sub)
    return TargetRun(target, list(sub.gates), time.perf_counter() - started, hit, dict(databases.executed),
                     list(sub.escaped), dict(lines))


def terminate(server: Server, prefix: str) -> None:
    with server.admin() as conn:
        conn.execute(
            "select pg_terminate_backend(pid) from pg_stat_activity where datname like %s and pid <> pg_backend_pid()",
            (f"{prefix}\\_%",),
        )
