"""What every history shares: where it runs (`Bench`), what a history looks like to the code
that drives it (`History`: the machine of `machine.py` is one), and the failure it reports."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Protocol

from evidence_lib.model.reference import Model
from evidence_lib.pg.db import Conn, Server


class ModelMismatch(AssertionError):
    """The engine answered or left its tables differently from the reference model."""


class OutOfTime(BaseException):
    """The history ran past its deadline, or a statement past its statement_timeout: the verdict is
    Timeout, not a mismatch. A BaseException: the property-based runner must not retry it."""


class Observer(Protocol):
    """Told about every operation a history checks, before it runs and after it was judged (the
    mutation sweep's reach oracle tries each mutant at exactly the operations that reach it)."""

    def before(self, history: Any, op: Any) -> None: ...

    def after(self, history: Any, op: Any) -> None: ...


@dataclass
class Bench:
    """Where histories run, and what they covered (shared by every history of one check).

    With `conn` set, every history runs inside that session's open transaction, each in a
    savepoint that is rolled back at its end (the single-session oracle of the mutation sweep:
    no database is cloned); otherwise each history gets a fresh clone of `template`."""

    server: Server
    template: str
    histories: int = 0
    phase: str = ""  # what the current history is: "tour:flow", "tour:step" or "random"
    steps: int = 0
    coverage: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (state, operation, answer)
    last_transcript: list[str] = field(default_factory=list)
    races: int = 0
    conn: Conn | None = None
    deadline: float | None = None  # time.monotonic() past which a history stops with OutOfTime
    observer: Observer | None = None  # told before and after every checked operation

    @property
    def transactional(self) -> bool:
        return self.conn is not None


class History(Protocol):
    """A history in progress, as the two-session races drive it."""

    model: Model
    conn: Conn
    url: str
    offset: float
    msg_ids: dict[tuple[str, str], int]
    transcript: list[str]

    @property
    def bench(self) -> Bench: ...

    def now(self) -> float: ...

    def state_of(self, run: str | None) -> str: ...

    def learn_ids(self, seen: dict[str, Any]) -> None: ...
