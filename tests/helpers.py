"""Small assertions shared by the tests; every one reads the database back."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from evidence_lib.harness.snapshots import Refusal, attempt
from evidence_lib.pg.db import Conn


def assert_refused(conn: Conn, query: str, params: Any, sqlstate: str, *names: str) -> Refusal:
    """The call fails with `sqlstate`, its message names `names`, and no row changed."""
    refusal = attempt(conn, query, params)
    assert refusal.sqlstate == sqlstate, (refusal.sqlstate, refusal.message)
    for name in names:
        assert name in refusal.message, (name, refusal.message)
    assert refusal.changed == {}, refusal.changed
    return refusal


def define(conn: Conn, flow: str, steps: list[tuple[str, list[str]]], **options: Any) -> None:
    """create_flow + add_step for each (slug, deps)."""
    args = ", ".join(f"{k} => %({k})s" for k in options)
    conn.execute(f"select engine.create_flow(%(f)s{', ' + args if args else ''})", {"f": flow, **options})
    for slug, deps in steps:
        conn.execute("select engine.add_step(%s, %s, %s)", (flow, slug, deps))


def queue_messages(conn: Conn, queue: str) -> list[dict[str, Any]]:
    rows = conn.execute(f"select to_jsonb(q) from pgmq.q_{queue.lower()} q order by msg_id").fetchall()
    return [r[0] for r in rows]


def archived_messages(conn: Conn, queue: str) -> list[dict[str, Any]]:
    rows = conn.execute(f"select to_jsonb(a) from pgmq.a_{queue.lower()} a order by msg_id").fetchall()
    return [r[0] for r in rows]


def task(conn: Conn, run_id: UUID, step: str) -> dict[str, Any]:
    row = conn.execute(
        "select to_jsonb(t) from engine.step_tasks t where run_id = %s and step_slug = %s",
        (run_id, step),
    ).fetchone()
    assert row is not None, f"no task {step} in run {run_id}"
    value: dict[str, Any] = row[0]
    return value


def step_state(conn: Conn, run_id: UUID, step: str) -> dict[str, Any]:
    row = conn.execute(
        "select to_jsonb(s) from engine.step_states s where run_id = %s and step_slug = %s",
        (run_id, step),
    ).fetchone()
    assert row is not None
    value: dict[str, Any] = row[0]
    return value


def run(conn: Conn, run_id: UUID) -> dict[str, Any]:
    row = conn.execute("select to_jsonb(r) from engine.runs r where run_id = %s", (run_id,)).fetchone()
    assert row is not None
    value: dict[str, Any] = row[0]
    return value


def scalar(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return row[0]
