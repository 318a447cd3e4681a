"""Scenario parts: the unit of evidence that both a scenario and the negative controls run.

A part is `fn(result, databases, mode)`: it takes fresh databases from `databases()` (each a
clone of a migrated template: the candidate's, or a mutant's in the negative controls), does
its work, and records gates in `result`. A scenario's `run` runs its parts on candidate
databases; the negative-controls scenario runs the same parts, not copies, on mutant ones.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from psycopg import sql

from evidence_lib import progress
from evidence_lib.engine.flows import QueueMode
from evidence_lib.mutation.coverage import COVERAGE_ENV, Covered, gate_key, python_lines
from evidence_lib.pg import db, migrate
from evidence_lib.pg.db import Server, connect
from evidence_lib.results.scenario import ScenarioResult

Part = Callable[[ScenarioResult, "Databases", QueueMode], None]


@dataclass(frozen=True)
class PartSpec:
    """A named part; `per_mode` parts run once per queue mode, the others once (mode "")."""

    name: str
    fn: Part
    per_mode: bool = True


def single_database(fn: Callable[[ScenarioResult, str, QueueMode], None]) -> Part:
    """A part that needs one fresh database."""

    def part(result: ScenarioResult, databases: Databases, mode: QueueMode) -> None:
        with databases() as url:
            fn(result, url, mode)

    return part


def modeless(fn: Callable[[ScenarioResult, str], None]) -> Part:
    """A part that needs one fresh database and no queue mode."""

    def part(result: ScenarioResult, databases: Databases, mode: QueueMode) -> None:
        with databases() as url:
            fn(result, url)

    return part


def run_part(result: ScenarioResult, spec: PartSpec, databases: Databases, mode: QueueMode | None) -> None:
    """Run one part; an exception becomes the red gate `<part>_ran_to_the_end` naming it (and is
    kept in `result.escaped`, so the mutation sweep can tell the engine's errors from others)."""
    try:
        spec.fn(result, databases, mode or "flow")
    except Exception as exc:
        result.escaped.append(exc)
        result.gate(f"{spec.name}_ran_to_the_end", False, f"{type(exc).__name__}: {exc}", mode or "")


def run_parts(
    result: ScenarioResult, parts: list[PartSpec], databases: Databases, queue_modes: list[QueueMode]
) -> None:
    """Every part: the once-only parts first, then each per-mode part in every mode (each one
    reported to the runner's terminal as it starts)."""
    plan: list[tuple[PartSpec, QueueMode | None]] = [(spec, None) for spec in parts if not spec.per_mode]
    plan += [(spec, mode) for mode in queue_modes for spec in parts if spec.per_mode]
    sink = os.environ.get(COVERAGE_ENV, "")
    for done, (spec, mode) in enumerate(plan):
        progress.report(f"{spec.name}" + (f" ({mode})" if mode else ""), done, len(plan), unit="parts")
        if not sink:
            run_part(result, spec, databases, mode)
            continue
        databases.coverage = True
        databases.executed.clear()
        started, first = time.perf_counter(), len(result.gates)
        with databases.collecting(), python_lines() as lines:
            run_part(result, spec, databases, mode)
        scenario = result.scenario.split("_", 1)[-1]  # "01_ab_proof" -> "ab_proof"
        label = f"{scenario}/{spec.name}" + (f" [{mode}]" if mode else "")
        gates = result.gates[first:]
        covered = Covered(label, round(time.perf_counter() - started, 3), dict(databases.executed), lines,
                          [gate_key(g) for g in gates if g.passed], [gate_key(g) for g in gates if not g.passed])
        path = Path(sink) / f"{scenario}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as out:
            out.write(json.dumps(asdict(covered)) + "\n")


@contextlib.contextmanager
def migrated_template(server: Server, *, prefix: str = "tmpl", patch: str = "") -> Iterator[str]:
    """A database with the candidate migrations applied (and `patch` run on top, in one
    transaction), to clone from; dropped afterwards. Yields its name."""
    with db.scratch_database(server, prefix=prefix) as url:
        migrate.apply_migrations(url)
        if patch:
            with connect(url, application_name="patch") as conn, conn.transaction():
                conn.execute(patch.encode())
        yield db.database_name(url)


class Databases:
    """Fresh databases cloned from a template on `server` (call it: a context manager yielding a
    URL); `hooks` arms test hooks for every session of each clone (only to prove that a gate can
    turn red); `patch` (a mutant) is run on each clone in one transaction before the part gets it,
    so the mutation sweep judges any number of mutants on the one migrated candidate, with no
    migration and no template per mutant. Parts that need the server itself (to crash it) read
    `server`."""

    def __init__(self, server: Server, template: str, *, hooks: str = "", prefix: str = "ev",
                 coverage: bool = False, patch: str = "") -> None:  # fmt: skip
        self.server, self.template, self.hooks, self.prefix = server, template, hooks, prefix
        self.patch = patch
        self.coverage = coverage
        self.executed: Counter[str] = Counter()  # engine function -> calls, with `coverage`
        self._counting = threading.Lock()  # clones may be dropped by several threads at once

    def _count(self, database: str, calls: dict[str, int]) -> None:
        if database.startswith(self.prefix) or database.startswith("model"):
            with self._counting:
                self.executed.update(calls)

    @contextlib.contextmanager
    def collecting(self) -> Iterator[None]:
        """While the block runs, count the engine functions every dropped clone executed."""
        if not self.coverage:
            yield
            return
        with db.function_calls(self._count):
            yield

    @contextlib.contextmanager
    def __call__(self) -> Iterator[str]:
        with db.scratch_database(self.server, template=self.template, prefix=self.prefix) as url:
            if self.hooks:
                with connect(url) as conn:
                    conn.execute(
                        sql.SQL("alter database {} set engine.hooks = {}").format(
                            sql.Identifier(db.database_name(url)), sql.Literal(self.hooks)
                        )
                    )
            if self.patch:
                with connect(url, application_name="mutant") as conn, conn.transaction():
                    conn.execute(self.patch.encode())
            yield url


def clones(server: Server, template: str, *, hooks: str = "", prefix: str = "ev", coverage: bool = False,
           patch: str = "") -> Databases:  # fmt: skip
    """Fresh databases cloned from `template` (see `Databases`)."""
    return Databases(server, template, hooks=hooks, prefix=prefix, coverage=coverage, patch=patch)


@contextlib.contextmanager
def candidate_databases(server: Server, *, hooks: str = "", prefix: str = "ev") -> Iterator[Databases]:
    """Clones of one freshly migrated candidate template, for a scenario's parts."""
    with migrated_template(server, prefix=f"{prefix}_tmpl") as template:
        yield clones(server, template, hooks=hooks, prefix=prefix)
