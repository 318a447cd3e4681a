"""The negative-controls catalogue: realistic engine defects the evidence must catch.

Each mutant is data: the contract rule or known defect it reintroduces, the patch (edits to one
engine function's `sql/` file, shipped as `create or replace` on top of the candidate artifact,
or a grant, or a documented worker seam), and the scenario parts whose gates must turn red
(every gate named must be red; a mutant that leaves every gate green survived).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from evidence_lib.engine.flows import QueueMode

Seam = Literal[
    "falsy_results_as_null",
    "transport_error_as_handler_failure",
    "settle_without_waiting",
    "pool_waits_past_the_horizon",
]


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


@dataclass(frozen=True)
class Mutant:
    name: str
    breaks: str
    targets: tuple[Target, ...]
    edits: tuple[Edit, ...] = ()
    statements: str = ""
    seam: Seam | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    needs_owned_server: bool = False  # its target crashes the server: skipped (and said) on DATABASE_URL


CONSISTENCY = "engine_and_queues_agree_after_every_step"
SETTLE = "0650_function_v2_settle.sql"
CLAIM = "0630_function_v2_claim.sql"


def catalogue() -> tuple[Mutant, ...]:
    """Every mutant, in catalogue order."""
    from evidence_lib.scenarios.controls.mutants_boundaries import BOUNDARIES
    from evidence_lib.scenarios.controls.mutants_known import KNOWN_DEFECTS
    from evidence_lib.scenarios.controls.mutants_v2 import V2_PROTOCOL

    return KNOWN_DEFECTS + V2_PROTOCOL + BOUNDARIES
