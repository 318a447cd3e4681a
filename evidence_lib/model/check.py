"""Run the model check: Hypothesis drives `EngineMachine` for a number of histories on clones of
a migrated database, with a seed that makes the run replayable. A failure comes back as a
`Counterexample`: the (shrunk) history as a transcript, the error, and the seed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase
from hypothesis.stateful import get_state_machine_test

from evidence_lib.model.bench import Bench, Observer, OutOfTime
from evidence_lib.model.machine import EngineMachine
from evidence_lib.model.probes_roles import ensure_nobody
from evidence_lib.model.tour import tour
from evidence_lib.pg.db import Conn, Server


@dataclass
class Counterexample:
    error: str
    transcript: list[str]
    seed: int
    shrunk: bool

    def text(self) -> str:
        steps = "\n".join(f"{i + 1:>3}. {line}" for i, line in enumerate(self.transcript))
        return f"seed {self.seed}{' (shrunk)' if self.shrunk else ''}\n{steps}\nfailed: {self.error}"


@dataclass
class CheckResult:
    bench: Bench
    seconds: float = 0.0
    counterexample: Counterexample | None = None  # from the random histories
    tour: Counterexample | None = None  # from the scripted tour (seed -1)
    settings: dict[str, Any] = field(default_factory=dict)
    out_of_time: str = ""  # the history ran past its deadline or a statement past statement_timeout

    @property
    def passed(self) -> bool:
        return self.counterexample is None and self.tour is None and not self.out_of_time


def run_tour(machine: type[EngineMachine], modes: tuple[str, ...] = ("flow", "step")) -> Counterexample | None:
    """The scripted tour in each queue mode; the first disagreement, if any."""
    ensure_nobody(machine.bench.server)  # the role probe's role, committed before the first history
    for mode in modes:
        machine.bench.phase = f"tour:{mode}"
        m = machine()
        try:
            tour(m, mode)
        except Exception as exc:  # a mismatch or a broken checker: a finding either way
            return Counterexample(f"{type(exc).__name__}: {str(exc)[:1500]}", list(m.transcript), -1, False)
        finally:
            m.teardown()
    return None


def machine_for(bench: Bench) -> type[EngineMachine]:
    """The state machine class whose histories run on `bench` (Hypothesis instantiates it)."""
    return type("Machine", (EngineMachine,), {"bench": bench})


SHRINK_SECONDS = 30  # a failure is shrunk for at most this long: a broken engine turns red fast


def check(
    server: Server, template: str, *, examples: int, steps: int, seed: int, shrink: bool = True,
    tour_first: bool = True, conn: Conn | None = None, deadline: float | None = None,
    modes: tuple[str, ...] = ("flow", "step"), observer: Observer | None = None,
    shrink_seconds: int = SHRINK_SECONDS, max_shrinks: int | None = None,
) -> CheckResult:  # fmt: skip
    """`examples` random histories of up to `steps` operations each (plus races), from `seed`;
    a failure is shrunk for at most `shrink_seconds` (Hypothesis's own shrink time limit, set
    here). How short a shrink cut off by time gets depends on the machine's load; `max_shrinks`
    (Hypothesis's count of successful shrinks, default its own) ends it after as many steps on
    any machine, so a caller that judges the shrunk length sets that and a generous time.

    With `conn` (a session inside an open transaction), every history runs in that transaction,
    each in a savepoint (no lost acknowledgements, no two-session races: one session); past
    `deadline` (time.monotonic()) the check stops and says so in `out_of_time`."""
    try:
        return _check(server, template, examples=examples, steps=steps, seed=seed, shrink=shrink,
                      tour_first=tour_first, conn=conn, deadline=deadline, modes=modes,
                      observer=observer, shrink_seconds=shrink_seconds,
                      max_shrinks=max_shrinks)  # fmt: skip
    except OutOfTime as exc:
        result = CheckResult(Bench(server, template, conn=conn), out_of_time=str(exc))
        result.settings = {"examples": examples, "steps": steps, "seed": seed, "shrink": shrink}
        return result


def _check(
    server: Server, template: str, *, examples: int, steps: int, seed: int, shrink: bool, tour_first: bool,
    conn: Conn | None, deadline: float | None, modes: tuple[str, ...], observer: Observer | None = None,
    shrink_seconds: int = SHRINK_SECONDS, max_shrinks: int | None = None,
) -> CheckResult:  # fmt: skip
    import time

    from hypothesis.internal.conjecture import engine

    ensure_nobody(server)  # a cluster-wide role: committed before any history, never inside one
    bench = Bench(server, template, conn=conn, deadline=deadline, observer=observer)
    machine = machine_for(bench)
    phases = (Phase.explicit, Phase.generate, Phase.shrink) if shrink else (Phase.explicit, Phase.generate)
    settings = hypothesis.settings(
        max_examples=max(examples, 1),
        stateful_step_count=steps,
        deadline=None,
        database=None,  # replay is by seed, not by a local example database
        phases=phases,
        suppress_health_check=list(HealthCheck),
        print_blob=False,
        report_multiple_bugs=False,
    )
    started = time.perf_counter()
    result = CheckResult(bench, settings={"examples": examples, "steps": steps, "seed": seed, "shrink": shrink})
    result.tour = run_tour(machine, modes) if tour_first else None
    if result.tour is not None or examples == 0:  # already red, or no random history asked for
        result.seconds = time.perf_counter() - started
        return result
    # at least half the steps: short histories rarely reach B, takeovers or attention
    bench.phase = "random"
    test = hypothesis.seed(seed)(get_state_machine_test(machine, settings=settings, _min_steps=steps // 2))
    limit, count = engine.MAX_SHRINKING_SECONDS, engine.MAX_SHRINKS
    engine.MAX_SHRINKING_SECONDS = shrink_seconds
    engine.MAX_SHRINKS = count if max_shrinks is None else max_shrinks
    try:
        test()
    except Exception as exc:  # a mismatch, or the engine broke the checker itself: both are findings
        result.counterexample = Counterexample(
            f"{type(exc).__name__}: {str(exc)[:1500]}", list(bench.last_transcript), seed, shrink
        )
    finally:
        engine.MAX_SHRINKING_SECONDS, engine.MAX_SHRINKS = limit, count
    result.seconds = time.perf_counter() - started
    return result
