"""What judging a mutant with a scenario part yields (`TargetRun`), the runner the scenarios layer
hands to the mutation package (`TargetRunner`: the package imports no scenario), and what a part's
run on a mutant means (`part_verdict`), in the statuses of the mutation-testing report schema:

- Killed: a gate that was green on the candidate, in this sweep, is red; or the part stopped on an
  error the engine raised: one of its own SQLSTATEs (its refusals `DR...`, its constraints and
  triggers `23...`, a deadlock or serialization failure `40...`, `22003`, a privilege it denies
  `42501`, a PL/pgSQL `raise` `P0001`), or any error raised inside an engine function (the
  server's context names `function engine.`); or, for a worker mutant, an exception raised by the
  worker code, anywhere in its chain of causes: in the mutant's own compiled code, in its file, or
  in another worker module refusing the state the mutant left (a lost connection never counts:
  that is the harness's); or a wait of the scenario ran out of its deadline (`WaitTimeout`: the state the
  contract promises never came, a liveness defect named by the wait);
- Timeout: the part ran past its deadline, or a liveness guard of the harness fired (statement or
  lock timeout, a session that neither completed nor blocked); tried once more with twice the
  time before it is reported;
- RuntimeError: the part stopped on anything else (a lost connection, a missing binary, a harness
  bug, an SQLSTATE of no engine rule), or only gates that were not green on the candidate turned
  red: the part could not judge this mutant, and the verdict says why (never a kill);
- no verdict (None): every gate green, the part had nothing to say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol

import psycopg

from evidence_lib.harness.locks import LivenessTimeout
from evidence_lib.harness.waits import WaitTimeout
from evidence_lib.mutation.controls import Target
from evidence_lib.mutation.coverage import Covered, gate_key
from evidence_lib.mutation.mutant import Verdict
from evidence_lib.pg.db import Server
from evidence_lib.results.gate import Gate

ENGINE_CLASSES = ("DR", "23", "40")  # refusals, integrity constraints and triggers, deadlock/serialization
ENGINE_STATES = {"22003", "42501", "P0001"}
TIMEOUT_STATES = {"57014", "55P03"}  # statement_timeout, lock_timeout: a liveness guard fired
FailureKind = Literal["engine", "mutant", "wait", "timeout", "infrastructure"]


WORKER_CODE = "/evidence_lib/workers/"
CONNECTION_LOST = (psycopg.OperationalError, psycopg.InterfaceError)


def _chain(exc: BaseException) -> list[BaseException]:
    """`exc` and its causes (`raise ... from`, and what it was raised while handling)."""
    seen: list[BaseException] = []
    at: BaseException | None = exc
    while at is not None and not any(at is s for s in seen):
        seen.append(at)
        at = at.__cause__ or at.__context__
    return seen


def _raised_in(exc: BaseException, markers: tuple[str, ...]) -> bool:
    """Whether a frame of `exc`'s chain runs code whose file name holds one of `markers`."""
    for link in _chain(exc):
        tb = link.__traceback__
        while tb is not None:
            name = tb.tb_frame.f_code.co_filename
            if any(marker in name for marker in markers):
                return True
            tb = tb.tb_next
    return False


def mutant_markers(mutant_id: str, file: str) -> tuple[str, ...]:
    """Where a worker mutant's exception comes from: its compiled code, its file, the worker code."""
    return (f"<mutant {mutant_id}>", file, WORKER_CODE)


def _by_the_mutant(exc: BaseException, markers: tuple[str, ...]) -> bool:
    if not markers:
        return False
    if _raised_in(exc, markers[:1]):
        return True  # the mutant's own code raised: whatever it is, the mutant did it
    if any(isinstance(link, CONNECTION_LOST) for link in _chain(exc)):
        return False  # a lost connection or a load-dependent failure is the harness's, not a kill
    return _raised_in(exc, markers[1:])


def failure_kind(exc: BaseException, mutated: tuple[str, ...] = ()) -> FailureKind:
    """Who stopped a part: the engine, the mutated worker code, a wait of the scenario that ran out,
    a liveness guard of the harness, or anything else."""
    if isinstance(exc, psycopg.Error) and exc.sqlstate:
        state = exc.sqlstate
        if state in TIMEOUT_STATES:
            return "timeout"
        if state[:2] in ENGINE_CLASSES or state in ENGINE_STATES:
            return "engine"
        context = exc.diag.context or ""
        if "function engine." in context:
            return "engine"
    if _by_the_mutant(exc, mutated):
        return "mutant"
    if isinstance(exc, WaitTimeout):
        return "wait"
    if isinstance(exc, LivenessTimeout | TimeoutError):
        return "timeout"
    return "infrastructure"


def _said(exc: BaseException) -> str:
    state = f" [{exc.sqlstate}]" if isinstance(exc, psycopg.Error) and exc.sqlstate else ""
    return f"{type(exc).__name__}{state}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"


@dataclass
class TargetRun:
    """One target part run against one database template (the candidate's or a mutant's)."""

    target: Target
    gates: list[Gate] = field(default_factory=list)
    seconds: float = 0.0
    deadline_hit: bool = False
    executed: dict[str, int] = field(default_factory=dict)  # engine function -> calls (with coverage)
    escaped: list[BaseException] = field(default_factory=list)  # what stopped the part, if anything
    lines: dict[str, list[int]] = field(default_factory=dict)  # worker lines run (with coverage)

    @property
    def red(self) -> list[str]:
        return [g.name for g in self.gates if not g.passed]

    @property
    def missing(self) -> list[str]:
        """Gates the target names that did not turn red."""
        return [name for name in self.target.gates if name not in self.red]

    def covered(self) -> Covered:
        """This run as the candidate's coverage of its part (with the gates that were green)."""
        return Covered(self.target.label, round(self.seconds, 3), dict(self.executed), dict(self.lines),
                       [gate_key(g) for g in self.gates if g.passed],
                       [gate_key(g) for g in self.gates if not g.passed])  # fmt: skip


class TargetRunner(Protocol):
    def __call__(self, server: Server, template: str, target: Target, deadline: float, tag: str,
                 coverage: bool = False, patch: str = "") -> TargetRun: ...  # fmt: skip


def part_verdict(run: TargetRun, candidate: Covered, deadline: float, mutated: tuple[str, ...] = ()) -> Verdict | None:
    """What one part's run on a mutant says (see the module docstring); None: nothing.
    `mutated`: a worker mutant's markers (`mutant_markers`), where an exception raised is its doing."""
    label = candidate.label
    if run.deadline_hit:
        return Verdict("Timeout", f"part {label}", f"ran past its deadline of {deadline:.0f} s; sessions terminated",
                       run.seconds)  # fmt: skip
    by_kind: dict[FailureKind, list[BaseException]] = {}
    for exc in run.escaped:
        by_kind.setdefault(failure_kind(exc, mutated), []).append(exc)
    green = set(candidate.green)
    red = [g for g in run.gates if not g.passed]
    killing = [g for g in red if gate_key(g) in green]
    if "engine" in by_kind:
        return Verdict("Killed", f"part {label}", f"the engine stopped it: {_said(by_kind['engine'][0])}", run.seconds)
    if "mutant" in by_kind:
        return Verdict("Killed", f"part {label}", f"the mutated code raised: {_said(by_kind['mutant'][0])}",
                       run.seconds)  # fmt: skip
    if killing:
        return Verdict("Killed", f"part {label}", ", ".join(gate_key(g) for g in killing[:4]), run.seconds)
    if "wait" in by_kind:
        return Verdict("Killed", f"part {label}", f"a wait of the scenario ran out: {_said(by_kind['wait'][0])}",
                       run.seconds)  # fmt: skip
    if "timeout" in by_kind:
        return Verdict("Timeout", f"part {label}", f"a liveness guard fired: {_said(by_kind['timeout'][0])}",
                       run.seconds)  # fmt: skip
    if "infrastructure" in by_kind:
        return Verdict("RuntimeError", f"part {label}",
                       f"stopped by something other than the engine: {_said(by_kind['infrastructure'][0])}",
                       run.seconds)  # fmt: skip
    if red:
        return Verdict("RuntimeError", f"part {label}",
                       "only gates that were not green on the candidate turned red: "
                       + ", ".join(gate_key(g) for g in red[:4]), run.seconds)  # fmt: skip
    return None
