"""Typed calls into the Dirty Runs v2 SQL API: one SQL statement per function, no retries.

The caller decides the session and the transaction; these functions only map arguments and
rows. Message ids are Python ints end to end, so ids beyond 2^53 stay exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import psycopg
from psycopg import sql as psql
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.v1 import TaskGrant
from evidence_lib.pg.db import Conn

Outcome = Literal["completed", "failed"]
Verdict = Literal["accepted", "replayed", "conflict", "stale", "terminal"]


@dataclass(frozen=True)
class Grant(TaskGrant):
    """A won v2 claim (`engine.v2_grant`): the task as v1 grants it, plus the claim that owns it
    and the lease horizon by which it must be settled."""

    claim_id: UUID
    lease_expires_at: datetime


@dataclass(frozen=True)
class Receipt:
    """The answer to a settlement (`engine.v2_receipt`)."""

    verdict: Verdict
    claim_id: UUID
    outcome: Outcome | None
    result: Json
    generation: int
    settled_at: datetime | None


@dataclass(frozen=True)
class Report:
    """What one reconcile call did (`engine.v2_report`)."""

    run_id: UUID
    generation: int
    actions: int
    processed: bool
    health: str
    run_status: str


def start_run(conn: Conn, flow_slug: str, input: Json) -> UUID:
    row = conn.execute("select engine.v2_start_run(%s, %s)", (flow_slug, Jsonb(input))).fetchone()
    assert row is not None
    return UUID(str(row[0]))


def claim(conn: Conn, run_id: UUID, step_slug: str, queue_name: str, message_id: int) -> Grant | None:
    """Claim one delivery; None when the task is not claimable now (or another session won)."""
    with conn.cursor(row_factory=class_row(Grant)) as cur:
        rows = cur.execute(
            "select * from engine.v2_claim(%s, %s, %s, array[%s]::bigint[])",
            (run_id, step_slug, queue_name, message_id),
        ).fetchall()
    return rows[0] if rows else None


def take_over(
    conn: Conn,
    run_id: UUID,
    step_slug: str,
    expected_claim_id: UUID,
    queue_name: str,
    message_id: int,
) -> Grant | None:
    """Take over an expired claim; None when the task used its takeover (health: attention)."""
    with conn.cursor(row_factory=class_row(Grant)) as cur:
        rows = cur.execute(
            "select * from engine.v2_take_over(%s, %s, %s, %s, array[%s]::bigint[])",
            (run_id, step_slug, expected_claim_id, queue_name, message_id),
        ).fetchall()
    return rows[0] if rows else None


def settle(conn: Conn, claim_id: UUID, outcome: Outcome, result: Json) -> Receipt:
    with conn.cursor(row_factory=class_row(Receipt)) as cur:
        row = cur.execute("select * from engine.v2_settle(%s, %s, %s)", (claim_id, outcome, Jsonb(result))).fetchone()
    assert row is not None
    return row


def reconcile(conn: Conn, run_id: UUID, max_actions: int = 8) -> Report:
    with conn.cursor(row_factory=class_row(Report)) as cur:
        row = cur.execute("select * from engine.v2_reconcile(%s, %s)", (run_id, max_actions)).fetchone()
    assert row is not None
    return row


def work_row(conn: Conn, run_id: UUID) -> dict[str, Any]:
    row = conn.execute("select to_jsonb(w) from engine.run_work w where run_id = %s", (run_id,)).fetchone()
    if row is None:
        raise KeyError(f"no work row for run {run_id}")
    value: dict[str, Any] = row[0]
    return value


@dataclass(frozen=True)
class Delivery:
    """One message read for one task: what a claim names."""

    run_id: UUID
    step_slug: str
    queue_name: str
    message_id: int


class ClaimUnanswered:
    """A pipelined call that failed: make it alone to learn why (its error names it)."""


UNANSWERED = ClaimUnanswered()
NEXT = "select * from engine.v2_reconcile_next(%s, %s::uuid[])"


def reconcile_next(conn: Conn, max_actions: int = 8, skip: list[UUID] | None = None) -> Report | None:
    """The next due run no other session holds, reconciled; None when nothing is due."""
    with conn.cursor(row_factory=class_row(Report)) as cur:
        row = cur.execute(NEXT, (max_actions, skip or [])).fetchone()
    return row


def reconcile_next_many(conn: Conn, calls: int, max_actions: int = 8, skip: list[UUID] | None = None,
                        ) -> list[Report | ClaimUnanswered | None]:  # fmt: skip
    """`calls` reconcile_next calls in one round trip, each its own transaction; a failed one comes
    back UNANSWERED (call reconcile_next alone for its error)."""
    cursors = []
    with conn.pipeline() as pipeline:
        for _ in range(calls):
            cur = conn.cursor(row_factory=class_row(Report))
            try:
                cur.execute(NEXT, (max_actions, skip or []))
                pipeline.sync()
            except psycopg.OperationalError:
                raise
            except psycopg.Error:
                pass
            cursors.append(cur)
    out: list[Report | ClaimUnanswered | None] = []
    for cur in cursors:
        try:
            out.append(cur.fetchone())
        except psycopg.ProgrammingError:
            out.append(UNANSWERED)
    return out


WAKE_CHANNEL = "engine_wake_{pid}"  # a waiting session's own channel; the payload names what woke it


def wake_channel(conn: Conn) -> str:
    """LISTEN on this session's own wake-up channel (once per session) and return its name."""
    name = WAKE_CHANNEL.format(pid=conn.info.backend_pid)
    conn.execute(psql.SQL("listen {}").format(psql.Identifier(name)))
    return name


def listen(conn: Conn, channel: str) -> None:
    """Register this session as an idle waiter on `channel` (v2_listen); the engine wakes one
    waiter per event on the session's own channel (`wake_channel`), consuming the registration."""
    conn.execute("select engine.v2_listen(%s)", (channel,))


def unlisten(conn: Conn, channel: str | None = None) -> None:
    """No longer an idle waiter on `channel` (every channel: None); the LISTEN stays."""
    conn.execute("select engine.v2_unlisten(%s)", (channel,))
