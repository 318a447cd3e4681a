"""What a race run leaves behind: its isolation-tester-style transcript, the pg_locks rows that
proved each wait, each step's outcome and timing, and each check's verdict."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StepRecord:
    name: str
    session: str
    label: str
    waited: bool = False
    wait_proofs: list[str] = field(default_factory=list)
    outcome: str = ""
    error: str | None = None
    seconds: float = 0.0


@dataclass
class CheckRecord:
    name: str
    passed: bool
    detail: str = ""


@dataclass
class PermutationRun:
    race: str
    permutation: str
    attempt: int
    lines: list[str] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    checks: list[CheckRecord] = field(default_factory=list)
    lock_rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.checks) and all(c.passed for c in self.checks)

    def transcript(self) -> str:
        head = f"permutation {self.permutation} (attempt {self.attempt})"
        verdict = "PASS" if self.passed else "FAIL"
        tail = [f"error: {self.error}"] if self.error else []
        return "\n".join([head, *self.lines, *tail, f"=> {verdict} in {self.seconds:.3f}s"])


@dataclass
class RaceResult:
    race: str
    description: str
    runs: list[PermutationRun] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.runs) and all(r.passed for r in self.runs)

    def transcript(self) -> str:
        return f"race {self.race}: {self.description}\n\n" + "\n\n".join(r.transcript() for r in self.runs)

    def failures(self) -> list[PermutationRun]:
        return [r for r in self.runs if not r.passed]
