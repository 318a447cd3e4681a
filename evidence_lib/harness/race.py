"""Races written like isolation-tester specs: setup, sessions with steps, permutations, checks.

A permutation is a list of entries:
- `hold:<point>`: the controller takes the hook point's lock; armed sessions park there;
- `<step name>`: the step is sent to its session, then the runner waits until it completed or
  is blocked (proven by a not-granted pg_locks row and pg_blocking_pids), and records which;
- `release` / `release:<point>`: the controller lets go; the runner then waits for every
  waiting step to complete or block again, in order;
- `check`: the permutation's checks run, each reading the database back.
No sleep decides an order; the only timeout is the liveness guard, which dumps pg_locks and
pg_stat_activity into the run's error and terminates the sessions.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from evidence_lib.harness.locks import LivenessTimeout, LockWait, dump
from evidence_lib.harness.sessions import Controller, Session
from evidence_lib.harness.transcript import CheckRecord, PermutationRun, RaceResult, StepRecord
from evidence_lib.pg.db import Conn, connect


@dataclass
class RaceContext:
    """What setup prepared (`data`), what each step returned or raised, and the database."""

    url: str
    data: dict[str, Any] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, psycopg.Error] = field(default_factory=dict)

    @contextlib.contextmanager
    def connect(self) -> Iterator[Conn]:
        with connect(self.url, application_name="check") as conn:
            yield conn


def default_summary(value: Any) -> str:
    if value is None:
        return "0 rows"
    if isinstance(value, list):
        return f"{len(value)} rows"
    return str(value)


@dataclass(frozen=True)
class Step:
    name: str
    label: str
    run: Callable[[Conn, RaceContext], Any]
    summarize: Callable[[Any], str] = default_summary


@dataclass(frozen=True)
class SessionSpec:
    steps: list[Step]
    hooks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Check:
    name: str
    fn: Callable[[RaceContext], tuple[bool, str]]


@dataclass(frozen=True)
class Permutation:
    label: str
    entries: list[str]
    checks: list[Check]


@dataclass(frozen=True)
class Race:
    name: str
    description: str
    setup: Callable[[RaceContext], None]
    sessions: dict[str, SessionSpec]
    permutations: list[Permutation]


Database = Callable[[], AbstractContextManager[str]]


class _Runner:
    def __init__(self, race: Race, url: str, ctx: RaceContext, run: PermutationRun, timeout: float) -> None:
        self.race, self.ctx, self.run = race, ctx, run
        self.controller = Controller(url, timeout)
        self.sessions = {n: Session(url, n, spec.hooks) for n, spec in race.sessions.items()}
        self.steps = {s.name: (n, s) for n, spec in race.sessions.items() for s in spec.steps}
        self.names = {sess.pid: n for n, sess in self.sessions.items()}
        self.names[self.controller.pid] = "controller"
        self.pending: dict[str, tuple[Future[Any], StepRecord, float]] = {}

    def close(self) -> None:
        for session in self.sessions.values():
            if self.pending:
                with contextlib.suppress(psycopg.Error):
                    self.controller.terminate(session)
            session.close()
        self.controller.close()

    def proof(self, record: StepRecord, found: list[LockWait]) -> str:
        texts = [w.describe(self.names) for w in found]
        record.wait_proofs.extend(texts)
        for w in found:
            self.run.lock_rows.append(
                {
                    "step": record.name,
                    "pid": w.pid,
                    "locktype": w.locktype,
                    "mode": w.mode,
                    "relation": w.relation,
                    "classid": w.classid,
                    "objid": w.objid,
                    "objsubid": w.objsubid,
                    "transactionid": w.transactionid,
                    "granted": False,
                    "blocked_by": [self.names.get(p, str(p)) for p in w.blocked_by],
                    "blocked_by_pids": list(w.blocked_by),
                }
            )
        return "; ".join(texts)

    def finish(self, record: StepRecord, future: Future[Any], started: float) -> str:
        record.seconds = time.perf_counter() - started
        try:
            value = future.result()
        except psycopg.Error as exc:
            self.ctx.errors[record.name] = exc
            record.error = f"[{exc.sqlstate}] {exc.diag.message_primary}"
            record.outcome = f"ERROR: {record.error}"
            return record.outcome
        self.ctx.results[record.name] = value
        record.outcome = self.steps[record.name][1].summarize(value)
        return record.outcome

    def step(self, name: str) -> None:
        session_name, step = self.steps[name]
        session = self.sessions[session_name]
        record = StepRecord(name, session_name, step.label)
        self.run.steps.append(record)
        started = time.perf_counter()
        future = session.send(lambda conn: step.run(conn, self.ctx))
        found = self.controller.settle(session, future)
        if found is None:
            self.run.lines.append(f"step {name}: {step.label} -> {self.finish(record, future, started)}")
        else:
            record.waited = True
            self.run.lines.append(f"step {name}: {step.label} <waiting ...>    [pg_locks: {self.proof(record, found)}]")
            self.pending[name] = (future, record, started)
        self.resolve()

    def resolve(self) -> None:
        """Let waiting steps complete (or block again), in the order they were sent."""
        progress = True
        while progress and self.pending:
            progress = False
            for name, (future, record, started) in list(self.pending.items()):
                found = self.controller.settle(self.sessions[record.session], future)
                if found is None:
                    del self.pending[name]
                    self.run.lines.append(f"step {name}: <... completed> {self.finish(record, future, started)}")
                    progress = True

    def checks(self, checks: list[Check]) -> None:
        verdicts = []
        for check in checks:
            try:
                ok, detail = check.fn(self.ctx)
            except Exception as exc:
                ok, detail = False, f"{type(exc).__name__}: {exc}"
            self.run.checks.append(CheckRecord(check.name, ok, detail))
            verdicts.append(f"{check.name}: {'pass' if ok else 'FAIL'}" + (f" ({detail})" if detail and not ok else ""))
        self.run.lines.append("check " + " · ".join(verdicts))

    def execute(self, permutation: Permutation) -> None:
        checked = False
        for entry in permutation.entries:
            if entry.startswith("hold:"):
                point = entry.removeprefix("hold:")
                key = self.controller.hold(point)
                self.run.lines.append(f"step hold {point}    [controller holds advisory 7001/{key}]")
            elif entry == "release" or entry.startswith("release:"):
                released = self.controller.release(entry.partition(":")[2] or None)
                self.run.lines.append(f"step release {', '.join(released)}")
                self.resolve()
            elif entry == "check":
                self.resolve()
                self.checks(permutation.checks)
                checked = True
            else:
                self.step(entry)
        if self.pending:
            raise LivenessTimeout(
                f"steps still waiting at the end: {list(self.pending)}\n" + dump(self.controller.conn)
            )
        if not checked:
            self.checks(permutation.checks)


Inspect = Callable[[RaceContext, PermutationRun], None]


def run_permutation(
    race: Race,
    permutation: Permutation,
    database: Database,
    attempt: int,
    timeout: float = 10.0,
    inspect: Inspect | None = None,
) -> PermutationRun:
    """One permutation on a fresh database; `inspect` reads that database back afterwards."""
    run = PermutationRun(race.name, permutation.label, attempt)
    started = time.perf_counter()
    with database() as url:
        ctx = RaceContext(url)
        race.setup(ctx)
        runner = _Runner(race, url, ctx, run, timeout)
        try:
            runner.execute(permutation)
        except LivenessTimeout as exc:
            run.error = f"liveness timeout: {exc}"
        finally:
            runner.close()
        if inspect:
            inspect(ctx, run)
    run.seconds = time.perf_counter() - started
    return run


def run_race(
    race: Race,
    database: Database,
    *,
    repeat: int = 1,
    timeout: float = 10.0,
    progress: Callable[[str], None] | None = None,
    inspect: Inspect | None = None,
) -> RaceResult:
    """Run every permutation `repeat` times, each on a fresh database; report every attempt."""
    result = RaceResult(race.name, race.description)
    for permutation in race.permutations:
        for attempt in range(1, repeat + 1):
            run = run_permutation(race, permutation, database, attempt, timeout, inspect)
            result.runs.append(run)
            if progress:
                progress(f"{race.name} / {permutation.label} #{attempt}: {'pass' if run.passed else 'FAIL'}")
    return result
