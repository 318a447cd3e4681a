"""The setups the race specs start from (each returns the parameters its steps bind), and the
small read-backs their checks share."""

from __future__ import annotations

from typing import Any

from evidence_lib.engine import v2
from evidence_lib.engine.flows import QueueMode, route
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.isolation import RaceContext
from evidence_lib.pg.db import Conn

SLUG = "race"


def defined(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    """The A -> B flow, no run."""
    flow = define_ab(conn, SLUG, mode)
    return {"flow": SLUG, "queue_a": route(flow, "A"), "queue_b": route(flow, "B")}


def read_a(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    """One v2 run; A's message reserved by a worker's read (not ownership)."""
    flow = define_ab(conn, SLUG, mode, timeout=1)  # lease = claim + 3 s; a takeover's clock is set ahead
    run_id = v2.start_run(conn, SLUG, {"n": 1})
    return {
        "flow": SLUG,
        "run": run_id,
        "queue_a": route(flow, "A"),
        "queue_b": route(flow, "B"),
        "msg_a": read_step_message(conn, flow, "A", run_id),
    }


def claimed_a(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    p = read_a(conn, mode)
    grant = v2.claim(conn, p["run"], "A", p["queue_a"], p["msg_a"])
    assert grant is not None
    return p | {"claim_1": grant.claim_id}


def settled_a(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    p = claimed_a(conn, mode)
    v2.settle(conn, p["claim_1"], "completed", {"a": 1})
    return p


def two_settled(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    """Two v2 runs of one flow, each with A settled: two runs due."""
    p = settled_a(conn, mode)
    flow = define_ab(conn, SLUG, mode, timeout=1)
    other = v2.start_run(conn, SLUG, {"n": 2})
    grant = v2.claim(conn, other, "A", p["queue_a"], read_step_message(conn, flow, "A", other))
    assert grant is not None
    v2.settle(conn, grant.claim_id, "completed", {"a": 2})
    return p | {"run_2": other}


def claimed_b(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    p = settled_a(conn, mode)
    v2.reconcile(conn, p["run"])
    flow = define_ab(conn, SLUG, mode, timeout=1)
    msg_b = read_step_message(conn, flow, "B", p["run"])
    grant = v2.claim(conn, p["run"], "B", p["queue_b"], msg_b)
    assert grant is not None
    return p | {"msg_b": msg_b, "claim_b": grant.claim_id}


def settled_b(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    p = claimed_b(conn, mode)
    v2.settle(conn, p["claim_b"], "completed", "b")
    return p


def rows_of(ctx: RaceContext, *steps: str) -> int:
    """How many rows the steps returned together (a refused step returned none)."""
    return sum(len(ctx.results.get(s, [])) for s in steps)


def sqlstate(ctx: RaceContext, step: str) -> str | None:
    error = ctx.errors.get(step)
    return None if error is None else error.sqlstate


def work(ctx: RaceContext) -> tuple[int, int, str]:
    with ctx.connect() as conn:
        row = conn.execute(
            "select requested_generation, processed_generation, health from engine.run_work where run_id = %s",
            (ctx.params["run"],),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), str(row[2])


def b_counts(ctx: RaceContext) -> tuple[int, int]:
    """(B tasks, B messages sent: live or archived) of the race's run."""
    run = str(ctx.params["run"])
    tasks = ctx.one("select count(*) from engine.step_tasks where run_id = %s and step_slug = 'B'", ctx.params["run"])
    queue = ctx.params["queue_b"]
    sent = ctx.one(
        f"select (select count(*) from pgmq.q_{queue} where message->>'run_id' = %s and message->>'step_slug' = 'B')"
        f" + (select count(*) from pgmq.a_{queue} where message->>'run_id' = %s and message->>'step_slug' = 'B')",
        run,
        run,
    )
    return int(tasks), int(sent)
