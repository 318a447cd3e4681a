"""What the reference model holds: outcomes, flow definitions with every option, runs (v1 and
v2), step states, tasks with their message and its visibility window, claims, and the numbers of
the contract. Plain data; the rules live in `reference` (v2), `v1rules` and `defrules`."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

LEASE_GRACE = 2.0
TAKEOVERS = 1
ERRORS_BEFORE_ATTENTION = 3
INPUT_MAX, RESULT_MAX = 65_536, 262_144
TIMEOUT_MIN, TIMEOUT_MAX = 1, 900
START_DELAY_B_MAX = 3600
UNDEFINED_TABLE = "42P01"  # pgmq on a dropped queue
INSUFFICIENT_PRIVILEGE = "42501"
CHECK_VIOLATION = "23514"
HOOK_FAILED = "DR900"
Window = tuple[float, float]
# How far outside the model's window a database instant may lie and still agree (the server's clock
# and the client's are the same machine's, read by two processes). The checker accepts an instant
# that far out, so the model must not answer a question about it with certainty that far out either
# (`Model._before`): an accepted instant is known only to within its window widened by this.
TOLERANCE = 0.05  # seconds


@dataclass(frozen=True)
class Outcome:
    kind: str  # "value", "empty", "error"
    value: Any = None  # the value or the SQLSTATE

    @staticmethod
    def error(state: str) -> Outcome:
        return Outcome("error", str(state))

    def text(self) -> str:
        return {"value": f"{self.value}", "empty": "(no row)", "error": f"error {self.value}"}[self.kind]


@dataclass
class StepDef:
    """One step as defined (None: inherit the flow's option)."""

    slug: str
    deps: tuple[str, ...] = ()
    max_attempts: int | None = None
    base_delay: int | None = None
    timeout: int | None = None
    start_delay: int | None = None
    index: int = 0
    queue: str = ""


@dataclass
class FlowDef:
    slug: str
    mode: str  # "flow" or "step"
    shape: str  # a name for transcripts ("ab", "abc", "diamond", ...)
    queues: dict[str, str]  # step -> route, in step order
    timeout: int
    max_attempts: int = 1
    base_delay: int = 1
    defs: dict[str, StepDef] = field(default_factory=dict)

    @property
    def steps(self) -> list[str]:
        return list(self.queues)

    def step(self, slug: str) -> StepDef:
        return self.defs.get(slug) or StepDef(slug, () if self.steps.index(slug) == 0 else (self.steps[0],))

    def effective(self, slug: str, option: str) -> int:
        own = getattr(self.step(slug), option)
        if option == "start_delay":
            return int(own or 0)
        return int(own if own is not None else getattr(self, option))

    def dependents(self, slug: str) -> list[str]:
        return [s for s in self.steps if slug in self.step(s).deps]

    def leaves(self) -> list[str]:
        return [s for s in self.steps if not self.dependents(s)]

    def row(self) -> tuple[Any, ...]:
        """What create_flow returns (the flows row, without its definition hash)."""
        return (self.slug, self.max_attempts, self.base_delay, self.timeout, self.mode)

    def step_row(self, slug: str) -> tuple[Any, ...]:
        """What add_step returns (the steps row)."""
        d = self.step(slug)
        return (self.slug, slug, self.steps.index(slug), len(d.deps), d.max_attempts, d.base_delay, d.timeout,
                d.start_delay, self.queues[slug])  # fmt: skip


@dataclass
class Task:
    status: str  # queued, started, completed, failed, cancelled
    queue: str
    message: str = "live"  # live, archived, gone (its queue was dropped)
    attempts: int = 0
    losses: int = 0
    output: Any = None
    vt: Window = (0.0, 0.0)  # when its message becomes visible to pgmq.read (an absolute time)
    started: Window | None = None  # v1: when it was started (stalled recovery measures from here)
    error: str | None = None  # v1: the error_message written by a failure or a stalled recovery


@dataclass
class Claim:
    run: str
    step: str
    state: str  # current, settled, revoked
    attempt: int
    lease: Window
    replaced_by: str | None = None
    timeout: int = 0  # the effective policy snapshotted at the first claim, kept by a takeover
    max_attempts: int = 1
    start_delay: int = 0


@dataclass
class Run:
    flow: str
    status: str = "started"
    steps: dict[str, str] = field(default_factory=dict)  # step -> status
    tasks: dict[str, Task] = field(default_factory=dict)
    requested: int = 0
    processed: int = 0
    health: str = "clean"
    errors: int = 0  # consecutive
    error_rows: int = 0
    next_attempt: Window | None = None
    output: Any = None
    protocol: str = "v2"
    input: Any = None
    remaining_steps: int = 0
    remaining_deps: dict[str, int] = field(default_factory=dict)  # step -> dependencies not yet completed
    ended: Window | None = None  # completed_at / failed_at (pruning measures from here)
    definition: tuple[Any, ...] = ()  # v2: the definition the run started with (its hash)


def _canon(value: Any) -> Any:
    """A JSON value in one canonical text (jsonb compares 1 and 1.0 equal; so does this)."""
    if value is None:
        return None
    return json.dumps(_numbers(value), sort_keys=True, separators=(",", ":"))


def _numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    return value
