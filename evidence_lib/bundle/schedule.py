"""Which scenarios may run side by side, and running them so.

The timing-insensitive scenarios run concurrently, `jobs` at a time, each on its own databases of
the run's server; the scenarios that crash and restart a server run on a cluster of their own (the
same build, started by the notebook) when the run owns its server, so a crash never touches a
neighbour; the mutation sample runs once the others are done (it judges with the coverage they
recorded); the performance scenario runs alone, last, so its figures are never taken under load.
With `jobs` 1 everything runs one after another in the order given. No gate changes meaning.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass

from evidence_lib.errors import BadInput

ALONE = ("performance",)  # timing: nothing else may run meanwhile
AFTER_OTHERS = ("mutation",)  # reads the coverage the other scenarios recorded in this bundle
LONGEST = ("races", "model_check", "negative_controls")  # start these first, so no slot idles at the end
OWN_CLUSTER = ("response_loss", "negative_controls", "mutation")  # crash and restart a server


class BadJobs(BadInput):
    """`--jobs` below 1."""


@dataclass
class Slot:
    """When one scenario ran, relative to the start of the run (seconds)."""

    name: str
    phase: int
    started: float = 0.0
    finished: float = 0.0

    @property
    def seconds(self) -> float:
        return self.finished - self.started


def phases(names: list[str], jobs: int, *, shared_server: bool = False) -> list[list[str]]:
    """The scenarios in the order they may start: a list of groups, each run `jobs` at a time,
    one group after the other. On a server the runner cannot give a cluster of its own to the
    scenarios that crash one (`shared_server`: DATABASE_URL), those run one at a time too."""
    if jobs < 1:
        raise BadJobs(f"--jobs must be at least 1 (got {jobs})")
    if jobs == 1:
        return [[n] for n in names]
    single = set(ALONE) | (set(OWN_CLUSTER) if shared_server else set())
    first = [n for n in names if n not in single and n not in AFTER_OTHERS]
    first.sort(key=lambda n: LONGEST.index(n) if n in LONGEST else len(LONGEST))  # stable: the rest keep their order
    by_itself = [[n] for n in names if n in single - set(ALONE) - set(AFTER_OTHERS)]
    after = [n for n in names if n in AFTER_OTHERS]
    alone = [[n] for n in names if n in ALONE]
    return [group for group in (first, *by_itself, after, *alone) if group]


def run_phases(groups: list[list[str]], jobs: int, run_one: Callable[[str], None],
               clock: Callable[[], float] = time.monotonic,
               on_interrupt: Callable[[], None] = lambda: None) -> list[Slot]:  # fmt: skip
    """Run each group with at most `jobs` at once; the longest ones first would need their times,
    so the order given is kept. KeyboardInterrupt reaches only this thread: `on_interrupt` stops
    the running ones (the runner interrupts their kernels), then it propagates."""
    origin, slots, lock = clock(), [], threading.Lock()

    def timed(name: str, phase: int) -> None:
        slot = Slot(name, phase, clock() - origin)
        with lock:
            slots.append(slot)
        try:
            run_one(name)
        finally:
            slot.finished = clock() - origin

    for number, group in enumerate(groups, start=1):
        with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(group))), thread_name_prefix="scenario") as pool:
            pending: set[Future[None]] = {pool.submit(timed, name, number) for name in group}
            try:
                while pending:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        future.result()
            except KeyboardInterrupt:
                for future in pending:
                    future.cancel()
                on_interrupt()
                wait(pending, timeout=60)
                raise
    return slots


def critical_path(slots: list[Slot]) -> list[Slot]:
    """The scenario that ended each phase last: together they set the run's wall time."""
    path = []
    for phase in sorted({s.phase for s in slots}):
        path.append(max((s for s in slots if s.phase == phase), key=lambda s: s.finished))
    return path
