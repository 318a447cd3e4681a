"""Typed calls into the engine's v1 SQL API and the PGMQ functions a worker uses.

Every function takes an open connection and runs exactly one SQL statement, so the caller
decides transactions, retries and which session a call belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from evidence_lib.engine.jsontypes import Json
from evidence_lib.pg.db import Conn


@dataclass(frozen=True)
class TaskGrant:
    """A task granted to a worker: what its handler runs on and where its message is
    (`engine.task_grant` from `start_tasks`; a v2 `Grant` adds the claim)."""

    run_id: UUID
    step_slug: str
    task_index: int
    queue_name: str
    message_id: int
    input: Json


@dataclass(frozen=True)
class QueueMessage:
    """A message as `pgmq.read` returns it."""

    msg_id: int
    read_ct: int
    enqueued_at: datetime
    last_read_at: datetime | None
    vt: datetime
    message: Json
    headers: Json


def start_flow(conn: Conn, flow_slug: str, input: Json) -> UUID:
    row = conn.execute("select engine.start_flow(%s, %s)", (flow_slug, Jsonb(input))).fetchone()
    assert row is not None
    return UUID(str(row[0]))


def start_tasks(conn: Conn, queue_name: str, message_ids: list[int]) -> list[TaskGrant]:
    with conn.cursor(row_factory=class_row(TaskGrant)) as cur:
        return cur.execute("select * from engine.start_tasks(%s, %s::bigint[])", (queue_name, message_ids)).fetchall()


def complete_task(conn: Conn, run_id: UUID, step_slug: str, task_index: int, output: Json) -> str:
    """Report a result; returns the task's status afterwards."""
    row = conn.execute(
        "select (engine.complete_task(%s, %s, %s, %s)).status",
        (run_id, step_slug, task_index, Jsonb(output)),
    ).fetchone()
    assert row is not None
    return str(row[0])


def fail_task(conn: Conn, run_id: UUID, step_slug: str, task_index: int, error: str) -> str:
    """Report a handler failure; returns the task's status afterwards."""
    row = conn.execute(
        "select (engine.fail_task(%s, %s, %s, %s)).status",
        (run_id, step_slug, task_index, error),
    ).fetchone()
    assert row is not None
    return str(row[0])


def requeue_stalled_tasks(conn: Conn) -> int:
    row = conn.execute("select engine.requeue_stalled_tasks()").fetchone()
    assert row is not None
    return int(row[0])


def prune_data_older_than(conn: Conn, retention: str) -> int:
    row = conn.execute("select engine.prune_data_older_than(%s::interval)", (retention,)).fetchone()
    assert row is not None
    return int(row[0])


def read_messages(conn: Conn, queue_name: str, vt_seconds: int, qty: int) -> list[QueueMessage]:
    """`pgmq.read`: reserve up to `qty` visible messages for `vt_seconds` (not ownership)."""
    with conn.cursor(row_factory=class_row(QueueMessage)) as cur:
        return cur.execute(
            "select msg_id, read_ct, enqueued_at, last_read_at, vt, message, headers from pgmq.read(%s, %s, %s)",
            (queue_name, vt_seconds, qty),
        ).fetchall()
