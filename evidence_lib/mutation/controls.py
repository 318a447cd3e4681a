"""Hand-written mutants (the negative controls): realistic engine defects the evidence must catch.

Each is data: the contract rule or known defect it reintroduces, the patch (edits to one engine
function's `sql/` file, shipped as `create or replace` on top of the candidate artifact, or a
grant, or a documented worker seam), and the scenario parts whose gates must turn red (every gate
named must be red; a control that leaves every gate green survived). `Control.mutant()` is the
same defect as a `Mutant`, applied like a generated one (`mutation.apply`); a survivor of the
generated sweep joins the catalogue by its stable id (`Control.generated`), so every bundle
re-checks it with the gate that now kills it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Literal

from evidence_lib import SQL_DIR
from evidence_lib.engine.flows import QueueMode
from evidence_lib.errors import EvidenceError
from evidence_lib.mutation.mutant import Mutant, Span, stable_id

Seam = Literal[
    "falsy_results_as_null",
    "transport_error_as_handler_failure",
    "settle_without_waiting",
    "pool_waits_past_the_horizon",
]


class ControlDoesNotApply(EvidenceError):
    """An edit's text is not in the candidate's `sql/` file exactly once, or a generated id is gone."""


@dataclass(frozen=True)
class Edit:
    """Replace `old` (which must occur exactly once) by `new` in `sql/<file>`."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Target:
    """A scenario part to run against the mutant, and the gates of it that must turn red."""

    scenario: str
    part: str
    gates: tuple[str, ...]
    mode: QueueMode | None = "flow"  # None: a part that runs once, without a queue mode

    @property
    def label(self) -> str:
        return f"{self.scenario}/{self.part}" + (f" [{self.mode}]" if self.mode else "")


@dataclass(frozen=True)
class Control:
    name: str
    breaks: str
    targets: tuple[Target, ...]
    edits: tuple[Edit, ...] = ()
    statements: str = ""
    seam: Seam | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    needs_owned_server: bool = False  # its target crashes the server: skipped (and said) on DATABASE_URL
    generated: str = ""  # the stable id of a generated mutant this control re-checks (its patch)

    def mutant(self) -> Mutant:
        """This control as a mutant (a generated one's own, when `generated` names it)."""
        if self.generated:
            from evidence_lib.mutation.registry import find

            return find(self.generated)
        if self.seam is not None:
            return Mutant(stable_id(self.name, "control", self.seam), "seam", f"worker seam {self.seam}",
                          "evidence_lib/workers/v2.py", "control", self.name, Span(0, 0), "", self.seam, "",
                          target=self.seam)  # fmt: skip
        files = edited_files(self)
        first = next(iter(files), "")
        functions = tuple(f.split("_function_", 1)[-1].removesuffix(".sql") for f in files)
        return Mutant(stable_id(self.name, "control", ""), "sql", f"control {self.name}", f"sql/{first}" if first
                      else "sql/9900_privileges.sql", "control", self.name, Span(0, 0), "", patch_diff(self),
                      patch_sql(self), functions=functions)  # fmt: skip


CONSISTENCY = "engine_and_queues_agree_after_every_step"
SETTLE = "0650_function_v2_settle.sql"
CLAIM = "0630_function_v2_claim.sql"


def edited_files(control: Control) -> dict[str, tuple[str, str]]:
    """`sql/` file name -> (candidate text, mutated text), for every file the control edits."""
    out: dict[str, tuple[str, str]] = {}
    for edit in control.edits:
        original = out[edit.file][0] if edit.file in out else (SQL_DIR / edit.file).read_text()
        text = out[edit.file][1] if edit.file in out else original
        count = text.count(edit.old)
        if count != 1:
            raise ControlDoesNotApply(f"control {control.name}: {edit.file} holds the edited text {count} times")
        out[edit.file] = (original, text.replace(edit.old, edit.new))
    return out


def patch_sql(control: Control) -> str:
    """The control as SQL to run on top of the candidate artifact, in one transaction."""
    parts = []
    for name, (_, text) in edited_files(control).items():
        if "create function " not in text:
            raise ControlDoesNotApply(f"control {control.name}: {name} defines no function")
        parts.append(
            f"-- control {control.name}: {name}\n" + text.replace("create function ", "create or replace function ", 1)
        )
    if control.statements:
        parts.append(f"-- control {control.name}: statements\n{control.statements}")
    return "\n".join(parts)


def patch_diff(control: Control) -> str:
    """The patch as a unified diff against `sql/` (the statements and seams, described)."""
    lines: list[str] = []
    for name, (before, after) in edited_files(control).items():
        lines += difflib.unified_diff(before.splitlines(), after.splitlines(), f"sql/{name}", f"mutant/{name}",
                                      lineterm="", n=1)  # fmt: skip
    if control.statements:
        lines.append(f"+ {control.statements}")
    if control.seam:
        lines.append(f"worker seam V2Worker: {control.seam}")
    return "\n".join(lines)
