"""Coverage, recorded by a baseline run on the candidate (PIT's and Stryker's first step): which
engine functions and which worker functions each scenario part executes, and how long it takes.

Engine functions come from `pg_stat_user_functions` (`track_functions = all` on every clone the
part makes); worker functions from a profile hook on every thread of this process while the part
runs. A mutant that nothing executes is NoCoverage, never a lucky survivor; a mutant is judged by
the parts that execute what it changes, fastest first.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from evidence_lib import PROJECT_ROOT
from evidence_lib.mutation.mutant import Mutant

WORKERS = str(PROJECT_ROOT / "evidence_lib" / "workers")
# a folder: while set, every scenario part records what it executes there (`<scenario>.jsonl`,
# one Covered per line); `make evidence` sets it so the mutation scenario needs no baseline run
COVERAGE_ENV = "EVIDENCE_COVERAGE"
ALWAYS = "(every part)"  # what a schema or privilege mutant touches: every part may notice it


@dataclass
class Covered:
    """What one scenario part (a target label, `scenario/part [mode]`) executed, and its time."""

    label: str
    seconds: float
    sql: dict[str, int] = field(default_factory=dict)  # engine function -> calls (0: every call raised)
    python: list[str] = field(default_factory=list)  # "module:qualname" of worker functions that ran


@dataclass
class CoverageMap:
    """Every part's coverage, plus the fast oracle's (the model check in one session)."""

    parts: list[Covered] = field(default_factory=list)
    model: dict[str, int] = field(default_factory=dict)  # engine functions the model oracle executes
    model_seconds: float = 0.0

    def parts_for(self, mutant: Mutant) -> list[Covered]:
        """The parts that execute what `mutant` changes, fastest first (all parts for a schema or
        privilege mutant, whose effect any part may meet). A part that runs in both queue modes
        runs in one: the faster mode that executes the mutant (the model oracle tries both modes)."""
        if mutant.kind == "python":
            found = [p for p in self.parts if _python_target(mutant) in p.python]
        elif not mutant.functions:
            found = list(self.parts)
        else:
            found = [p for p in self.parts if any(f in p.sql for f in mutant.functions)]
        one_mode: dict[str, Covered] = {}
        for part in sorted(found, key=lambda p: p.seconds):
            one_mode.setdefault(part.label.split(" [", 1)[0], part)
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
            out.parts += [Covered(**json.loads(line)) for line in file.read_text().splitlines() if line.strip()]
        return out

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    @staticmethod
    def load(path: Path) -> CoverageMap:
        data: dict[str, Any] = json.loads(path.read_text())
        return CoverageMap([Covered(**p) for p in data["parts"]], data["model"], data["model_seconds"])


def _python_target(mutant: Mutant) -> str:
    """A SQL constant is covered where a function of its module runs that reads it: its module."""
    return mutant.target if mutant.family != "py-sql" else mutant.target.split(":", 1)[0] + ":*"


@contextlib.contextmanager
def python_calls() -> Iterator[set[str]]:
    """Every worker function (`module:qualname`) called on any thread while the block runs; a
    module's SQL constants count as covered (`module:*`) when any of its functions ran."""
    seen: set[str] = set()
    codes: set[Any] = set()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code not in codes and code.co_filename.startswith(WORKERS):
                codes.add(code)
                module = "evidence_lib.workers." + Path(code.co_filename).stem
                seen.add(f"{module}:{code.co_qualname}")
                seen.add(f"{module}:*")

    previous = sys.getprofile()
    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(previous)
        threading.setprofile(None)
