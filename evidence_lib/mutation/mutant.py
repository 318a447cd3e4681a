"""A mutant: one small change to one engine object (or one worker function), as data.

Generated mutants come from the operator families (`mutation.families`), hand-written ones from
the negative-controls catalogue (`mutation.catalogue`); both are applied the same way
(`mutation.apply`) and judged by the same oracle chain (`mutation.judge`). A mutant's `id` is
stable across revisions: a hash of the mutated object's normalized source, the operator and the
position inside the object, so a verdict can be reused while none of the three changes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["sql", "python", "seam"]  # seam: a control's documented worker seam
# the statuses of the mutation-testing report schema (Stryker, Mull, ... share them)
Status = Literal["Killed", "Survived", "NoCoverage", "CompileError", "RuntimeError", "Timeout", "Ignored", "Pending"]
DETECTED: tuple[Status, ...] = ("Killed", "Timeout")
VALID: tuple[Status, ...] = ("Killed", "Timeout", "Survived", "NoCoverage")


@dataclass(frozen=True)
class Span:
    """Character offsets in the object's source file, `end` exclusive."""

    start: int
    end: int


@dataclass(frozen=True)
class Position:
    """1-based line and column (the report schema's form), `end` exclusive."""

    line: int
    column: int


def position(text: str, offset: int) -> Position:
    line = text.count("\n", 0, offset) + 1
    return Position(line, offset - (text.rfind("\n", 0, offset) + 1) + 1)


@dataclass(frozen=True)
class Mutant:
    """One mutant of one object. `patch` is what applies it: SQL run on top of the candidate in
    one transaction (`kind` sql), or the mutated source of one Python function (`kind` python,
    `target` names the function as `module:qualname`)."""

    id: str
    kind: Kind
    obj: str  # the engine object or Python function, e.g. "function engine.v2_claim"
    file: str  # the source file, relative to the project root
    family: str  # the operator family, e.g. "relational"
    operator: str  # the mutator, e.g. "<To<="
    span: Span  # the text of `file` the mutant replaces (`original`)
    original: str  # the source text at `span`
    replacement: str  # what it becomes (for the report's diff)
    patch: str
    target: str = ""  # python: "module:qualname"; sql: the function (or table) the patch replaces
    functions: tuple[str, ...] = field(default_factory=tuple)  # the engine functions it touches
    focus: Span | None = None  # the mutated node itself, where the report points (default: span)

    @property
    def location(self) -> Span:
        return self.focus or self.span

    @property
    def label(self) -> str:
        return f"{self.obj} [{self.family}/{self.operator}] @{self.span.start}"


def stable_id(normalized_source: str, operator: str, where: str) -> str:
    """The mutant's id: 12 hex digits of sha256(normalized source, operator, position)."""
    digest = hashlib.sha256("\x1f".join((normalized_source, operator, where)).encode()).hexdigest()
    return digest[:12]


@dataclass(frozen=True)
class Verdict:
    """How one mutant ended: its status, what detected it (or why not), and the time it took."""

    status: Status
    by: str = ""  # "model: the tour", "model: a random history", "part ab_proof/proof [flow]", ...
    detail: str = ""
    seconds: float = 0.0
    parts_run: int = 0
