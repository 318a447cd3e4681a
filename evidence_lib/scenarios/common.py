"""Building blocks shared by scenarios: the v2 A -> B flow, reading a step's message, lease
expiry, and reading back authoritative rows."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any, Literal
from uuid import UUID

from psycopg import sql

from evidence_lib import db, engine, migrate
from evidence_lib.db import Conn, Server, connect
from evidence_lib.errors import EvidenceError
from evidence_lib.flows import AnyFlow, Flow, compile_flow, route, with_step_queues
from evidence_lib.jsontypes import Json

QueueMode = Literal["flow", "step"]
ABSteps = Literal["A", "B"]


def identity(payload: Json) -> Json:
    return payload


def ab_flow(
    slug: str = "ab", mode: QueueMode = "flow", *, timeout: int = 30, b_start_delay: int | None = None
) -> AnyFlow:
    """The v2 proof flow: A (root) -> B, max_attempts 1, in the given queue mode."""
    flow: Flow[ABSteps] = Flow(slug, max_attempts=1, base_delay=1, timeout=timeout)
    flow.add("A", identity).add("B", identity, deps=["A"], start_delay=b_start_delay)
    return with_step_queues(flow) if mode == "step" else flow


def define_ab(conn: Conn, slug: str = "ab", mode: QueueMode = "flow", **options: Any) -> AnyFlow:
    flow = ab_flow(slug, mode, **options)
    compile_flow(conn, flow)
    return flow


def read_step_message(conn: Conn, flow: AnyFlow, step: str, run_id: UUID) -> int:
    """Reserve (pgmq.read) the message of `step` of `run_id` and return its id. Messages of
    other runs that the read reserved stay in the queue with their vt moved by the read."""
    task = conn.execute(
        "select message_id from engine.step_tasks where run_id = %s and step_slug = %s", (run_id, step)
    ).fetchone()
    if task is None or task[0] is None:
        raise EvidenceError(f"run {run_id} has no message for step {step}")
    for message in engine.read_messages(conn, route(flow, step), 30, 100):
        if message.msg_id == task[0]:
            return message.msg_id
    raise EvidenceError(f"message {task[0]} of run {run_id} step {step} is not visible")


def wait_for_lease_expiry(conn: Conn, claim_id: UUID, timeout: float = 30.0) -> None:
    """Return once the server clock is past the claim's lease horizon (a lease must really
    expire; this wait lets it, it orders nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute(
            "select clock_timestamp() > lease_expires_at, "
            "extract(epoch from lease_expires_at - clock_timestamp()) "
            "from engine.task_claims where claim_id = %s",
            (claim_id,),
        ).fetchone()
        if row is None:
            raise EvidenceError(f"unknown claim {claim_id}")
        if row[0]:
            return
        if time.monotonic() > deadline:
            raise EvidenceError(f"lease of claim {claim_id} did not expire within {timeout}s")
        time.sleep(min(max(float(row[1]), 0.0) + 0.01, 0.5))  # lets the lease expire


def rows(conn: Conn, query: str, params: Any = None) -> list[dict[str, Any]]:
    """Rows as dicts (for tables and checks)."""
    cur = conn.execute(query, params)
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def one(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else row[0]


def wait_for_backoff(conn: Conn, run_id: UUID, timeout: float = 90.0) -> None:
    """Return once the server clock is past the run's next_attempt_at (a backoff must really
    pass before the next attempt counts; this wait lets it, it orders nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        left = one(
            conn,
            "select extract(epoch from next_attempt_at - clock_timestamp())::float8 "
            "from engine.run_work where run_id = %s",
            (run_id,),
        )
        if left is None or left < 0:
            return
        if time.monotonic() > deadline:
            raise EvidenceError(f"backoff of run {run_id} did not pass within {timeout}s")
        time.sleep(min(float(left) + 0.01, 1.0))  # lets the backoff pass


@contextlib.contextmanager
def scenario_server(database_url: str = "") -> Iterator[Server]:
    """The server a scenario runs on: `database_url`, else `DATABASE_URL`, else a throwaway one."""
    with db.open_server(database_url or None) as server:
        yield server


@contextlib.contextmanager
def scenario_database(server: Server, *, hooks: str = "", prefix: str = "ev") -> Iterator[str]:
    """A fresh scratch database with the candidate migrations applied. `hooks` arms test hooks
    for every session of that database (only used to prove that a gate can turn red)."""
    with db.scratch_database(server, prefix=prefix) as url:
        migrate.apply_migrations(url)
        if hooks:
            with connect(url) as conn:
                conn.execute(
                    sql.SQL("alter database {} set engine.hooks = {}").format(
                        sql.Identifier(db.database_name(url)), sql.Literal(hooks)
                    )
                )
        yield url


def modes(queue_modes: str) -> list[QueueMode]:
    """Parse the notebooks' `queue_modes` parameter ("flow,step")."""
    out: list[QueueMode] = []
    for part in queue_modes.split(","):
        name = part.strip()
        if name not in ("flow", "step"):
            raise EvidenceError(f"unknown queue mode {name!r}: use flow, step or flow,step")
        out.append(name)  # type: ignore[arg-type]
    return out


@contextlib.contextmanager
def timed(result: Any, phase: str, **labels: Any) -> Iterator[None]:
    """Record the wall time of a phase in a ScenarioResult."""
    start = time.perf_counter()
    try:
        yield
    finally:
        result.timing(phase, time.perf_counter() - start, **labels)


def step_of(flow: AnyFlow, step: str) -> str | None:
    """The step selector a worker of `flow` needs to serve `step` (None for a plain flow)."""
    return step if flow.queue_mode == "step" else None
