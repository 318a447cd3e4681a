"""The oracle chain that judges one mutant, cheapest first, stopping at the first detection:

1. the model oracle: one session on one database of this job; the mutant is created and exercised
   inside one transaction that rolls back (PostgreSQL's DDL is transactional: no database is
   cloned): the scripted tour of every operation in both queue modes, then a few seeded random
   histories, each answer and the whole state compared with the reference model;
2. the parts oracle: the scenario parts that execute what the mutant changes (coverage), fastest
   first, each on clones of a template that has the mutant applied, stopping at the first red
   gate.

Deadlines follow PIT's rule: the candidate's own time for the same work x factor + constant; a
mutant that runs into one is a Timeout (detected, and listed as a liveness guard to tighten).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import replace

from evidence_lib.model.check import CheckResult, check
from evidence_lib.mutation.apply import MutantDoesNotCompile, apply_sql, swapped
from evidence_lib.mutation.controls import Target
from evidence_lib.mutation.coverage import Covered
from evidence_lib.mutation.judging import TargetRunner, mutant_markers, part_verdict
from evidence_lib.mutation.mutant import Mutant, Verdict
from evidence_lib.pg import db
from evidence_lib.pg.db import Conn, Server, connect

SEED = 20261204
TIMEOUT_FACTOR = 1.5  # PIT: timeoutFactor
TIMEOUT_CONSTANT = 3.0  # PIT: timeoutConst (seconds)
ALL, RANDOM = "all", "random"  # the parts of the model's histories ModelOracle.judge can run
STATEMENT_TIMEOUT_MS = 2000  # no statement of the model's histories takes a tenth of this


def deadline_for(seconds: float, factor: float = TIMEOUT_FACTOR, constant: float = TIMEOUT_CONSTANT) -> float:
    return seconds * factor + constant


class ModelOracle:
    """The fast oracle, on a database of its own cloned once from the candidate template."""

    def __init__(self, server: Server, candidate: str, *, examples: int = 2, steps: int = 30, seed: int = SEED,
                 tag: str = "0") -> None:  # fmt: skip
        self.server, self.candidate = server, candidate
        self.examples, self.steps, self.seed = examples, steps, seed
        self.name = db.scratch_name(f"mo{tag}")
        self.url = db.create_database(server, self.name, template=candidate)
        self.conn: Conn = connect(self.url, application_name="mutation_model_oracle")
        self.baseline = 0.0
        self.baselines: dict[str, float] = {}  # part -> the candidate's time for it
        self.candidate_passed: dict[str, bool] = {}  # part -> the candidate agreed with the model there

    def close(self) -> None:
        self.conn.close()
        db.drop_database(self.server, self.name)

    def _run(self, deadline: float | None, part: str = ALL) -> CheckResult:
        """The histories of `part`: ALL, one tour ("tour:flow", "tour:step") or RANDOM (the seeded
        random histories without the tour)."""
        modes: tuple[str, ...] = ("flow", "step")
        tour_first, examples = True, self.examples
        if part.startswith("tour:"):
            examples, modes = 0, (part.removeprefix("tour:"),)
        elif part == RANDOM:
            tour_first = False
        elif part != ALL:
            raise ValueError(f"unknown part of the model's histories: {part!r}")
        return check(self.server, self.candidate, examples=examples, steps=self.steps, seed=self.seed,
                     shrink=False, conn=self.conn, deadline=deadline, tour_first=tour_first,
                     modes=modes)  # fmt: skip

    def calibrate(self, part: str = ALL) -> CheckResult:
        """Run the candidate through the oracle (it must agree) and time it for the deadline. A
        candidate that disagrees runs once more with twice the statement timeout, as a Timeout
        does: a loaded machine can cut one of its statements off, and a real disagreement repeats
        (the histories are seeded), so a red candidate stays red and judges nothing."""
        for factor in (1.0, 2.0):
            started = time.perf_counter()
            with self._transaction():
                if factor != 1.0:
                    self.conn.execute(f"set local statement_timeout = {int(STATEMENT_TIMEOUT_MS * factor)}")
                result = self._run(None, part)
            if result.passed:
                break
        self.baselines[part] = time.perf_counter() - started
        if part == ALL:
            self.baseline = self.baselines[part]
        return result

    def calls(self) -> tuple[dict[str, int], float]:
        """The engine functions the oracle's histories execute on the candidate (and its time)."""
        started = time.perf_counter()
        self.conn.execute("set track_functions = 'all'")
        with self._transaction():
            self._run(None)
            rows = self.conn.execute(
                "select p.proname, pg_catalog.pg_stat_get_xact_function_calls(p.oid) from pg_catalog.pg_proc as p"
                " join pg_catalog.pg_namespace as n on n.oid = p.pronamespace where n.nspname = 'engine'"
            ).fetchall()
        return {str(name): int(n or 0) for name, n in rows if n}, time.perf_counter() - started

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        self.conn.execute("begin")
        try:
            self.conn.execute(f"set local statement_timeout = {STATEMENT_TIMEOUT_MS}")
            yield
        finally:
            self.conn.execute("rollback")

    def judge(self, mutant: Mutant, factor: float = 1.0, part: str = ALL) -> Verdict:
        """Every history of `part` with `mutant` applied from the start; `factor` stretches the
        deadline and the statement timeout (a Timeout is tried once more with twice the time)."""
        if part not in self.baselines:
            self.candidate_passed[part] = self.calibrate(part).passed
        if not self.candidate_passed.get(part, True):  # a red part on the candidate kills nothing
            return Verdict("RuntimeError", "model", f"the candidate itself is red in the histories of {part}", 0.0)
        started = time.perf_counter()
        with self._transaction():
            if factor != 1.0:
                self.conn.execute(f"set local statement_timeout = {int(STATEMENT_TIMEOUT_MS * factor)}")
            try:
                apply_sql(self.conn, mutant)
            except MutantDoesNotCompile as exc:
                return Verdict("CompileError", "the server", str(exc), time.perf_counter() - started)
            result = self._run(time.monotonic() + deadline_for(self.baselines[part], TIMEOUT_FACTOR * factor), part)
        seconds = time.perf_counter() - started
        if result.out_of_time:
            return Verdict("Timeout", "model", result.out_of_time, seconds)
        found = result.tour or result.counterexample
        if found is not None:
            by = "model: the tour" if result.tour else f"model: a random history (seed {self.seed})"
            step = found.transcript[-1] if found.transcript else ""
            return Verdict("Killed", by, f"{step} :: {found.error}"[:600], seconds)
        what = "every history" if part == ALL else f"every history of {part}"
        return Verdict("Survived", "model", f"{what} agreed with the model", seconds)


def _target(covered: Covered) -> Target:
    scenario, rest = covered.label.split("/", 1)
    part, _, mode = rest.partition(" [")
    return Target(scenario, part, (), mode.rstrip("]") or None)  # type: ignore[arg-type]


def judge_with_parts(server: Server, candidate: str, mutant: Mutant, parts: list[Covered], runner: TargetRunner,
                     tag: str) -> Verdict:  # fmt: skip
    """The covering parts (each proven green on the candidate in this sweep), fastest first: the
    first that kills or times out decides (a Timeout is tried once more with twice the time); a
    part that cannot judge the mutant (RuntimeError) is said unless a later one kills it."""
    started = time.perf_counter()
    if not parts:
        return Verdict("NoCoverage", "", "no scenario part executes what it changes", 0.0)
    cannot: list[Verdict] = []
    patch = mutant.patch if mutant.kind == "sql" else ""  # applied to each clone a part makes
    try:
        judged = _parts(server, candidate, mutant, parts, runner, tag, patch, cannot, started)
    except MutantDoesNotCompile as exc:
        return Verdict("CompileError", "the compiler", str(exc), time.perf_counter() - started)
    if judged is not None:
        return judged
    seconds = time.perf_counter() - started
    if cannot:
        first = cannot[0]
        return Verdict("RuntimeError", first.by, f"{first.detail}" + (f" (and {len(cannot) - 1} more parts)"
                       if len(cannot) > 1 else ""), seconds, len(parts))  # fmt: skip
    return Verdict("Survived", "", f"{len(parts)} covering parts stayed green", seconds, len(parts))


def _parts(server: Server, candidate: str, mutant: Mutant, parts: list[Covered], runner: TargetRunner, tag: str,
           patch: str, cannot: list[Verdict], started: float) -> Verdict | None:  # fmt: skip
    """The first part's Killed or Timeout, else None (what could not judge goes to `cannot`)."""
    with swapped(mutant):
        for i, covered in enumerate(parts):
            deadline = deadline_for(covered.seconds)
            mutated = mutant_markers(mutant.id, mutant.file) if mutant.kind == "python" else ()
            verdict = part_verdict(runner(server, candidate, _target(covered), deadline, f"{tag}p{i}", patch=patch),
                                   covered, deadline, mutated)  # fmt: skip
            if verdict is not None and verdict.status == "Timeout":
                verdict = part_verdict(runner(server, candidate, _target(covered), 2 * deadline, f"{tag}p{i}r",
                                              patch=patch), covered, 2 * deadline, mutated)  # fmt: skip
                if verdict is not None and verdict.status == "Timeout":
                    verdict = replace(verdict, detail=f"{verdict.detail} (and again with twice the time)")
            if verdict is None:
                continue
            if verdict.status in ("Killed", "Timeout"):
                return replace(verdict, seconds=time.perf_counter() - started, parts_run=i + 1)
            cannot.append(verdict)
    return None
