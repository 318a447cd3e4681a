"""What judging a mutant with a scenario part yields (`TargetRun`), and the runner the scenarios
layer hands to the mutation package (`TargetRunner`): the package imports no scenario."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from evidence_lib.bundle.result import Gate
from evidence_lib.mutation.controls import Target
from evidence_lib.pg.db import Server


@dataclass
class TargetRun:
    """One target part run against one database template (the candidate's or a mutant's)."""

    target: Target
    gates: list[Gate] = field(default_factory=list)
    seconds: float = 0.0
    deadline_hit: bool = False
    executed: dict[str, int] = field(default_factory=dict)  # engine function -> calls (with coverage)

    @property
    def red(self) -> list[str]:
        return [g.name for g in self.gates if not g.passed]

    @property
    def missing(self) -> list[str]:
        """Gates the target names that did not turn red."""
        return [name for name in self.target.gates if name not in self.red]


class TargetRunner(Protocol):
    def __call__(self, server: Server, template: str, target: Target, deadline: float, tag: str,
                 coverage: bool = False) -> TargetRun: ...  # fmt: skip
