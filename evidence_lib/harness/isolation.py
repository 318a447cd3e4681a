"""Races written and run like PostgreSQL's isolation tester (`src/test/isolation`).

A `RaceSpec` has a setup, sessions with named steps whose text is the SQL that runs (parameters
bound from what the setup returns), hook points inside the engine that the controller holds
(so interleavings reach inside the functions), optional permutations, and checks that read the
database back. With no permutations, every interleaving of the sessions' steps runs (each
session's own steps keep their order). Pruning rule, documented: the controller takes the
spec's hook points before the first step of every permutation (holding a lock nobody waits for
changes nothing; the orders where a step passes a point before it is held are the orders where
it is released first, which are enumerated); a permutation that asks a session to run a step
while its previous step still waits is invalid and reported as such, as the isolation tester
does.

Each step is sent, then the runner waits until it completed or is blocked, proven by a
not-granted `pg_locks` row and `pg_blocking_pids`; a blocked step is shown `<waiting ...>` with
the lock and who holds it, and the runner goes on. After every step, waiting steps that can
finish are shown `<... completed>` in the order they were sent. At the end the controller lets
go of everything. The transcript is normalized (ids, xids, pids and times masked) so it can be
compared with a committed expected file.

Determinism: a transcript must depend on the engine's locks and the controller's steps, never on
which backend the kernel runs first. So "blocked" means blocked on a lock that only a controller
step can free: held by the controller (a hook point), by a session with no step in flight (an
open transaction between its steps), or by a session that is itself blocked that way
(`locks.stuck_waits`). A wait on a session that is still running, on a backend outside the race
(autovacuum) or on a relation extension lock ends by itself; the runner looks again instead of
printing it. Two sessions released by one controller step therefore complete, and are printed,
in the order they were sent, unless the engine makes one wait for the other. Where both orders
are correct and the engine does not decide (two sessions released together that compete for
one lock), the spec must release them one at a time; `make races REPEAT=30 LOAD=1` runs every
permutation under a competing load and reports any spec whose transcript is not stable.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from evidence_lib import progress
from evidence_lib.engine.flows import QueueMode
from evidence_lib.harness.locks import LivenessTimeout, LockWait, dump
from evidence_lib.harness.sessions import HOOK_KEY_SPACE, Controller, Session
from evidence_lib.pg.db import Conn, connect

Database = Callable[[], AbstractContextManager[str]]
CONTROLLER = "ctl"


@dataclass(frozen=True)
class Step:
    """A step of a session: `sql` runs as is with the setup's parameters (`%(name)s`); `show`
    names the result columns the transcript prints (masked)."""

    name: str
    sql: str
    show: tuple[str, ...] = ()


@dataclass(frozen=True)
class Release:
    """A controller step: let go of one hook point."""

    name: str
    point: str


@dataclass
class RaceContext:
    """What the setup bound (`params`), what each step returned or raised, and the database."""

    url: str
    mode: QueueMode
    params: dict[str, Any] = field(default_factory=dict)
    results: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    errors: dict[str, psycopg.Error] = field(default_factory=dict)

    @contextlib.contextmanager
    def connect(self) -> Iterator[Conn]:
        with connect(self.url, application_name="check") as conn:
            yield conn

    def one(self, query: str, *params: Any) -> Any:
        with self.connect() as conn:
            row = conn.execute(query.encode(), params or None).fetchone()
        return None if row is None else row[0]


@dataclass(frozen=True)
class Check:
    name: str
    fn: Callable[[RaceContext], tuple[bool, str]]


@dataclass(frozen=True)
class RaceSpec:
    """A race, read like an isolation spec."""

    name: str
    description: str
    setup: Callable[[Conn, QueueMode], dict[str, Any]]
    sessions: dict[str, tuple[Step | Release, ...]]
    checks: tuple[Check, ...]
    hooks: dict[str, tuple[str, ...]] = field(default_factory=dict)  # session -> armed points
    holds: tuple[str, ...] = ()  # points the controller holds from the start
    settings: dict[str, dict[str, str]] = field(default_factory=dict)  # session -> settings
    permutations: tuple[tuple[str, ...], ...] | None = None
    contention: bool = True  # some interleaving must make a session wait on another's lock

    def steps(self) -> dict[str, tuple[str, Step | Release]]:
        return {s.name: (session, s) for session, steps in self.sessions.items() for s in steps}

    def interleavings(self) -> list[tuple[str, ...]]:
        """The permutations given, or every interleaving of the sessions' steps."""
        if self.permutations is not None:
            return list(self.permutations)
        return interleave([[s.name for s in steps] for steps in self.sessions.values()])


def interleave(sequences: list[list[str]]) -> list[tuple[str, ...]]:
    """Every merge of `sequences` that keeps each sequence's own order."""
    live = [s for s in sequences if s]
    if not live:
        return [()]
    out: list[tuple[str, ...]] = []
    for i, seq in enumerate(live):
        rest = [*live[:i], seq[1:], *live[i + 1 :]]
        out += [(seq[0], *tail) for tail in interleave(rest)]
    return out


@dataclass
class WaitProof:
    step: str
    locktype: str
    target: str
    holders: list[str]
    pids: tuple[int, int] | None  # (waiting pid, first holder pid)


@dataclass
class PermutationRun:
    race: str
    mode: str
    permutation: tuple[str, ...]
    attempt: int
    lines: list[str] = field(default_factory=list)
    proofs: list[WaitProof] = field(default_factory=list)
    checks: list[tuple[str, bool, str]] = field(default_factory=list)
    invalid: str = ""
    error: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return bool(self.invalid) or (not self.error and bool(self.checks) and all(ok for _, ok, _ in self.checks))

    def transcript(self) -> str:
        """The normalized transcript (what the expected file holds)."""
        head = f"starting permutation: {' '.join(self.permutation)}"
        if self.invalid:
            return f"{head}\ninvalid permutation detected: {self.invalid}"
        tail = [f"error: {self.error}"] if self.error else []
        return "\n".join([head, *self.lines, *tail])


class _Runner:
    def __init__(self, spec: RaceSpec, ctx: RaceContext, run: PermutationRun, timeout: float) -> None:
        self.spec, self.ctx, self.run, self.timeout = spec, ctx, run, timeout
        self.controller = Controller(ctx.url, timeout)
        self.sessions = {
            name: Session(ctx.url, name, list(spec.hooks.get(name, ()))) for name in spec.sessions if name != CONTROLLER
        }
        for name, settings in spec.settings.items():
            for key, value in settings.items():
                self.sessions[name].conn.execute("select set_config(%s, %s, false)", (key, value))
        self.names = {s.pid: n for n, s in self.sessions.items()} | {self.controller.pid: CONTROLLER}
        self.controller.members = {s.pid for s in self.sessions.values()}
        self.points = {self.controller.hook_key(p): p for p in spec.holds}
        self.pending: dict[str, Future[list[dict[str, Any]]]] = {}
        self.masks: dict[str, str] = {}

    def close(self) -> None:
        for session in self.sessions.values():
            if self.pending:
                with contextlib.suppress(psycopg.Error):
                    self.controller.terminate(session)
            session.close()
        self.controller.close()

    def execute(self) -> None:
        for point in self.spec.holds:
            self.controller.hold(point)
            self.line(f"step {CONTROLLER}_hold: hold {point}")
        steps = self.spec.steps()
        for name in self.run.permutation:
            session, step = steps[name]
            if isinstance(step, Release):
                self.controller.release(step.point)
                self.line(f"step {name}: release {step.point}")
            elif session in {steps[p][0] for p in self.pending}:
                self.run.invalid = f"step {name} while session {session} is still waiting"
                return
            else:
                self.send(session, step)
            self.resolve()
        if self.controller.held:
            self.controller.release()
        self.resolve()
        self.await_the_server()
        if self.pending:
            raise LivenessTimeout(
                f"steps still waiting at the end: {list(self.pending)}\n" + dump(self.controller.conn)
            )

    def send(self, session_name: str, step: Step) -> None:
        session = self.sessions[session_name]
        future = session.send(lambda conn: _rows(conn, step.sql, self.ctx.params))
        found = self.controller.settle(session, future, self.busy() | {session.pid})
        if found is None:
            self.line(f"step {step.name}: {step.sql}")
            self.finish(step, future)
        else:
            self.line(f"step {step.name}: {step.sql} <waiting ...>  [{self.proof(step.name, found)}]")
            self.pending[step.name] = future

    def await_the_server(self) -> None:
        """Sessions still blocked when every step was sent wait on each other: only the server
        can end that (its deadlock detector aborts one after deadlock_timeout). Wait for a step
        to complete, at most `timeout` seconds in all (a liveness bound), as the isolation
        tester does."""
        deadline = time.monotonic() + self.timeout
        while self.pending and (left := deadline - time.monotonic()) > 0:
            done, _ = futures.wait(list(self.pending.values()), timeout=left, return_when=futures.FIRST_COMPLETED)
            if not done:
                return
            self.resolve()

    def resolve(self) -> None:
        """Let waiting steps finish (or block again), shown in the order they were sent."""
        steps = self.spec.steps()
        progress = True
        while progress and self.pending:
            progress = False
            for name, future in list(self.pending.items()):
                session_name, step = steps[name]
                if self.controller.settle(self.sessions[session_name], future, self.busy()) is None:
                    del self.pending[name]
                    self.line(f"step {name}: <... completed>")
                    assert isinstance(step, Step)
                    self.finish(step, future)
                    progress = True

    def busy(self) -> set[int]:
        """The backends with a step in flight (the others hold what they hold until their next step)."""
        steps = self.spec.steps()
        return {self.sessions[steps[name][0]].pid for name in self.pending}

    def finish(self, step: Step, future: Future[list[dict[str, Any]]]) -> None:
        try:
            rows = future.result()
        except psycopg.Error as exc:
            self.ctx.errors[step.name] = exc
            self.line(f"ERROR:  {exc.diag.message_primary} [{exc.sqlstate}]")
            return
        self.ctx.results[step.name] = rows
        if step.show:
            for row in rows:
                self.line(" " + " ".join(f"{c}={row.get(c)}" for c in step.show))
        self.line(f" ({len(rows)} row{'' if len(rows) == 1 else 's'})")

    def proof(self, step: str, found: list[LockWait]) -> str:
        w = found[0]
        holders = [self.names.get(p, "other") for p in w.blocked_by]
        if w.locktype == "advisory" and w.classid == HOOK_KEY_SPACE:
            target = f"hook {self.points.get(int(w.objid or 0), '?')}"
        else:
            target = {"transactionid": "transactionid", "tuple": "tuple", "relation": "relation"}.get(
                w.locktype, w.locktype
            ) + (f" {w.relation}" if w.relation else "")
        pids = (w.pid, w.blocked_by[0]) if w.blocked_by else None
        self.run.proofs.append(WaitProof(step, w.locktype, target, holders, pids))
        return f"{target} held by {', '.join(holders)}"

    def line(self, text: str) -> None:
        self.run.lines.append(self.mask(text))

    def mask(self, text: str) -> str:
        def uuid(m: re.Match[str]) -> str:
            return self.masks.setdefault(m.group(0), f"<id-{len(self.masks) + 1}>")

        text = UUID_RE.sub(uuid, text)
        text = TIME_RE.sub("<time>", text)
        return re.sub(r"\b(xid|pid|transaction) \d+", r"\1 <n>", text)


UUID_RE = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIME_RE = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d(:\d\d)?)?")


def _rows(conn: Conn, query: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = conn.execute(query.encode(), params)
    if cur.description is None:
        return []
    names = [d.name for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


Inspect = Callable[[RaceContext, PermutationRun], None]


def run_permutation(
    spec: RaceSpec,
    mode: QueueMode,
    permutation: tuple[str, ...],
    database: Database,
    attempt: int = 1,
    timeout: float = 10.0,
    inspect: Inspect | None = None,
) -> PermutationRun:
    """One permutation on a fresh database; `inspect` reads that database back afterwards."""
    run = PermutationRun(spec.name, mode, permutation, attempt)
    started = time.perf_counter()
    with database() as url:
        ctx = RaceContext(url, mode)
        with connect(url, application_name="setup") as conn:
            ctx.params = spec.setup(conn, mode)
        runner = _Runner(spec, ctx, run, timeout)
        try:
            runner.execute()
        except LivenessTimeout as exc:
            run.error = f"liveness timeout: {exc}"
        finally:
            runner.close()
        if not run.invalid:
            for check in spec.checks:
                try:
                    ok, detail = check.fn(ctx)
                except Exception as exc:
                    ok, detail = False, f"{type(exc).__name__}: {exc}"
                run.checks.append((check.name, ok, detail))
            run.lines.append("check " + " · ".join(f"{n}: {'pass' if ok else 'FAIL'}" for n, ok, _ in run.checks))
            if inspect:
                inspect(ctx, run)
    run.seconds = time.perf_counter() - started
    return run


def run_spec(
    spec: RaceSpec,
    mode: QueueMode,
    database: Database,
    *,
    repeat: int = 1,
    timeout: float = 10.0,
    inspect: Inspect | None = None,
    jobs: int = 1,
) -> list[PermutationRun]:
    """Every permutation `repeat` times, each on a fresh database; every attempt is kept, in plan
    order. `jobs` permutations run at once: each has its own database, its own sessions and its
    own controller, and every lock it proves (row locks, advisory locks) lives in that database,
    so runs side by side cannot order each other; `inspect` is called one run at a time."""
    plan = [(attempt, permutation) for attempt in range(1, repeat + 1) for permutation in spec.interleavings()]
    lock = threading.Lock()
    done = 0

    def checked(ctx: RaceContext, run: PermutationRun) -> None:
        assert inspect is not None
        with lock:
            inspect(ctx, run)

    def one_run(attempt: int, permutation: tuple[str, ...]) -> PermutationRun:
        nonlocal done
        run = run_permutation(spec, mode, permutation, database, attempt, timeout, checked if inspect else None)
        with lock:
            done += 1
            progress.report(f"{spec.name} ({mode})", done, len(plan), unit="permutation runs")
        return run

    if jobs <= 1:
        return [one_run(attempt, permutation) for attempt, permutation in plan]
    with futures.ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="permutation") as pool:
        return list(pool.map(lambda item: one_run(*item), plan))


def transcript(runs: list[PermutationRun]) -> str:
    """The expected-file form: each distinct permutation's transcript once, in order."""
    seen: dict[tuple[str, ...], str] = {}
    for run in runs:
        seen.setdefault(run.permutation, run.transcript())
    return "\n\n".join(seen.values()) + "\n"
