"""Coverage, recorded by a run of every scenario part on the candidate (PIT's and Stryker's first
step): which engine functions and which lines of the worker code each part executes, how long it
takes, and which of its gates were green.

Engine functions come from `pg_stat_user_functions` (`track_functions = all` on every clone the
part makes); worker lines from coverage.py on every thread of this process while the part runs,
per line as PIT and coverage.py record it. A mutant on a line no part executes is NoCoverage,
never a lucky survivor; a mutant is judged by the parts that execute what it changes, fastest
first, and a part's red gate kills it only when that gate was green on the candidate.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evidence_lib import PROJECT_ROOT
from evidence_lib.mutation.mutant import Mutant, position
from evidence_lib.results.gate import Gate

WORKERS = PROJECT_ROOT / "evidence_lib" / "workers"
# a folder: while set, every scenario part records what it executes there (`<scenario>.jsonl`,
# one Covered per line); `make evidence` sets it so the mutation scenario needs no baseline run
COVERAGE_ENV = "EVIDENCE_COVERAGE"
# parts whose two queue modes run different things: the model-check tour runs its probes (the
# schema's refusals, the roles, the definitions) in flow mode only, so neither mode stands for both
BOTH_MODES = ("model_check/tour",)
# the parts that are the project's own tests of the worker code (`pytest/tests/<file>::<test>`):
# they judge Python mutants only (they run on clones of the candidate, never a SQL mutant's)
UNIT_TESTS = "pytest/"
# the test files that drive the worker code (workers, reconciler driver, takeover command, timers),
# with what they import from `tests/`; every test function of them is a part
WORKER_TESTS = ("tests/test_v1_worker.py", "tests/test_v2_worker.py", "tests/test_worker_outages.py",
                "tests/test_reconciler.py", "tests/test_queues.py", "tests/test_worker_timing.py",
                "tests/test_worker_base.py", "tests/test_worker_connections.py", "tests/test_worker_config.py",
                "tests/test_worker_wakeups.py", "tests/test_worker_followup.py",
                "tests/test_worker_settle_groups.py", "tests/test_worker_takeover.py")  # fmt: skip
TEST_SUPPORT = ("tests/conftest.py", "tests/helpers.py", "tests/v2_helpers.py")
ALWAYS = "(every part)"  # what a schema or privilege mutant touches: every part may notice it


def gate_key(gate: Gate) -> str:
    """A gate's key within one part: its mode, name and point."""
    return f"{gate.mode}/{gate.name}" + (f"@{gate.point}" if gate.point else "")


@dataclass
class Covered:
    """What one scenario part (a target label, `scenario/part [mode]`) executed on the candidate,
    its time, and the keys of its gates that were green there."""

    label: str
    seconds: float
    sql: dict[str, int] = field(default_factory=dict)  # engine function -> calls (0: every call raised)
    lines: dict[str, list[int]] = field(default_factory=dict)  # worker file (from the root) -> lines run
    green: list[str] = field(default_factory=list)  # gate_key of every gate green on the candidate
    red: list[str] = field(default_factory=list)  # gate_key of every gate red on the candidate

    def runs_line(self, file: str, lines: range) -> bool:
        executed = self.lines.get(file, ())
        return any(n in lines for n in executed)


@dataclass
class CoverageMap:
    """Every part's coverage, plus the fast oracle's (the model check in one session)."""

    parts: list[Covered] = field(default_factory=list)
    model: dict[str, int] = field(default_factory=dict)  # engine functions the model oracle executes
    model_seconds: float = 0.0

    def parts_for(self, mutant: Mutant) -> list[Covered]:
        """The parts that execute what `mutant` changes, fastest first (all parts for a schema or
        privilege mutant, whose effect any part may meet). A part that runs in both queue modes
        runs in one: the faster mode that executes the mutant (the model oracle tries both modes),
        except the parts of BOTH_MODES."""
        if mutant.kind == "python":
            found = [p for p in self.parts if _runs(p, mutant)]
        elif not mutant.functions:
            found = [p for p in self.parts if not p.label.startswith(UNIT_TESTS)]
        else:
            found = [p for p in self.parts if any(f in p.sql for f in mutant.functions)]
        one_mode: dict[str, Covered] = {}
        for part in sorted(found, key=lambda p: p.seconds):
            name = part.label.split(" [", 1)[0]
            one_mode.setdefault(part.label if name in BOTH_MODES else name, part)
        return list(one_mode.values())

    def model_covers(self, mutant: Mutant) -> bool:
        return mutant.kind == "sql" and (not mutant.functions or any(self.model.get(f) for f in mutant.functions))

    def covered(self, mutant: Mutant) -> bool:
        return self.model_covers(mutant) or bool(self.parts_for(mutant))

    @staticmethod
    def from_folder(folder: Path) -> CoverageMap:
        """The parts recorded under `folder` by the scenarios of one bundle."""
        out = CoverageMap()
        for file in sorted(folder.glob("*.jsonl")):
            out.parts += [_covered(json.loads(line)) for line in file.read_text().splitlines() if line.strip()]
        return out

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    @staticmethod
    def load(path: Path) -> CoverageMap:
        data: dict[str, Any] = json.loads(path.read_text())
        return CoverageMap([_covered(p) for p in data["parts"]], data["model"], data["model_seconds"])


def _covered(data: dict[str, Any]) -> Covered:
    known = {k: v for k, v in data.items() if k in Covered.__dataclass_fields__}
    return Covered(**known)


def mutant_lines(mutant: Mutant) -> range:
    """The lines of its file a Python mutant changes (1-based, end inclusive as a range)."""
    path = PROJECT_ROOT / mutant.file
    text = path.read_text() if path.is_file() else ""
    first = position(text, mutant.span.start).line
    last = position(text, max(mutant.span.end - 1, mutant.span.start)).line
    return range(first, last + 1)


def _runs(part: Covered, mutant: Mutant) -> bool:
    """A Python mutant is covered where a line it changes ran; a SQL constant of a module (read
    when the module is imported) where any line of its module ran."""
    if mutant.family == "py-sql":
        return bool(part.lines.get(mutant.file))
    return part.runs_line(mutant.file, mutant_lines(mutant))


@contextlib.contextmanager
def python_lines() -> Iterator[dict[str, list[int]]]:
    """Every line of the worker code run on any thread while the block runs (coverage.py), as
    {file from the project root: sorted lines}, filled in when the block ends."""
    import coverage

    lines: dict[str, list[int]] = {}
    cov = coverage.Coverage(data_file=None, source=[str(WORKERS)], concurrency=["thread"], branch=False)
    cov.start()
    try:
        yield lines
    finally:
        cov.stop()
        data = cov.get_data()
        for file in data.measured_files():
            executed = data.lines(file) or []
            if executed:
                lines[str(Path(file).resolve().relative_to(PROJECT_ROOT))] = sorted(executed)
