"""What the race specs share: a started race run, A's claim, reading rows back, and how a step's
value shows in a transcript."""

from __future__ import annotations

from typing import Any

from evidence_lib.engine import v2
from evidence_lib.engine.flows import QueueMode, route
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.race import RaceContext
from evidence_lib.pg.db import Conn, connect, one


def show_grant(value: Any) -> str:
    return "0 rows" if value is None else f"1 row (claim {str(value.claim_id)[:8]})"


def show_receipt(value: Any) -> str:
    return f"{value.verdict} (generation {value.generation})"


def show_report(value: Any) -> str:
    return (
        f"generation {value.generation}, {value.actions} action(s), processed "
        f"{value.processed}, health {value.health}, run {value.run_status}"
    )


def start_race_run(ctx: RaceContext, mode: QueueMode, *, timeout: int = 30) -> Conn:
    conn = connect(ctx.url, application_name="setup")
    flow = define_ab(conn, "race", mode, timeout=timeout)
    run_id = v2.start_run(conn, "race", {"n": 1})
    ctx.data.update(flow=flow, run=run_id, queue_a=route(flow, "A"), queue_b=route(flow, "B"))
    return conn


def claim_a(ctx: RaceContext, conn: Conn) -> v2.Grant:
    msg = read_step_message(conn, ctx.data["flow"], "A", ctx.data["run"])
    grant = v2.claim(conn, ctx.data["run"], "A", ctx.data["queue_a"], msg)
    assert grant is not None
    ctx.data.update(msg_a=msg, claim_1=grant.claim_id)
    return grant


def ask(ctx: RaceContext, sql: str, *params: Any) -> Any:
    with ctx.connect() as conn:
        return one(conn, sql, params or None)


def claims_of(ctx: RaceContext, step: str = "A") -> list[tuple[Any, ...]]:
    with ctx.connect() as conn:
        return conn.execute(
            "select claim_id, state, replaced_by, lease_expires_at from engine.task_claims "
            "where run_id = %s and step_slug = %s order by claimed_at",
            (ctx.data["run"], step),
        ).fetchall()
