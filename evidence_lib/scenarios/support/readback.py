"""Authoritative rows of a v2 run, read back for evidence tables and gates."""

from __future__ import annotations

import time
from typing import Any
from uuid import UUID

from evidence_lib.engine.flows import AnyFlow, route
from evidence_lib.pg.db import Conn, connect, one

RUN_STATE = """
select r.status as run,
       w.requested_generation as requested, w.processed_generation as processed, w.health,
       (select status from engine.step_states where run_id = r.run_id and step_slug = 'A') as a_step,
       (select status from engine.step_tasks where run_id = r.run_id and step_slug = 'A') as a_task,
       (select status from engine.step_states where run_id = r.run_id and step_slug = 'B') as b_step,
       (select status from engine.step_tasks where run_id = r.run_id and step_slug = 'B') as b_task,
       (select message_id from engine.step_tasks where run_id = r.run_id and step_slug = 'B') as b_message_id,
       (select count(*) from engine.task_claims where run_id = r.run_id) as claims,
       (select string_agg(state, ',' order by claimed_at) from engine.task_claims
         where run_id = r.run_id) as claim_states,
       (select count(*) from engine.task_settlements where run_id = r.run_id) as settlements
  from engine.runs r join engine.run_work w using (run_id)
 where r.run_id = %s
"""


def queue_counts(conn: Conn, queue: str, run_id: UUID) -> tuple[int, int]:
    """(messages of this run in the queue, messages of this run in its archive)."""
    live = one(conn, f"select count(*) from pgmq.q_{queue} where message->>'run_id' = %s", (str(run_id),))
    archived = one(conn, f"select count(*) from pgmq.a_{queue} where message->>'run_id' = %s", (str(run_id),))
    return int(live), int(archived)


def run_state(conn: Conn, flow: AnyFlow, run_id: UUID, step: str = "") -> dict[str, Any]:
    """One row: the run, its work row, A and B step states and tasks, claims, settlements, and
    its messages in A's and B's routes and archives."""
    cur = conn.execute(RUN_STATE, (run_id,))
    names = [d.name for d in cur.description or []]
    row = cur.fetchone()
    assert row is not None, f"no run {run_id}"
    state: dict[str, Any] = {"step": step, **dict(zip(names, row, strict=True))}
    queue_a, queue_b = route(flow, "A"), route(flow, "B")
    state["b_live"] = int(
        one(
            conn,
            f"select count(*) from pgmq.q_{queue_b} where message->>'run_id' = %s and message->>'step_slug' = 'B'",
            (str(run_id),),
        )
    )
    if queue_a == queue_b:
        state["queue"], state["archived"] = queue_counts(conn, queue_a, run_id)
    else:
        state["queue_a"], state["archived_a"] = queue_counts(conn, queue_a, run_id)
        state["queue_b"], state["archived_b"] = queue_counts(conn, queue_b, run_id)
    return state


def message_facts(conn: Conn, queues: list[str]) -> dict[str, int]:
    """Across `queues`: messages archived, messages left, and archived messages that repeat a
    (run, step) identity (a duplicate send would show up here)."""
    facts = {"archived": 0, "left": 0, "duplicate_messages": 0}
    for queue in queues:
        facts["archived"] += int(one(conn, f"select count(*) from pgmq.a_{queue}"))
        facts["left"] += int(one(conn, f"select count(*) from pgmq.q_{queue}"))
        facts["duplicate_messages"] += int(
            one(
                conn,
                f"select count(*) - count(distinct (message->>'run_id', message->>'step_slug')) from pgmq.a_{queue}",
            )
        )
    return facts


SESSIONS_GONE_WITHIN = 10.0  # seconds for closed sessions' backends to exit (and flush their counters)


def deadlock_count(url: str) -> int:
    """pg_stat_database.deadlocks of this database, as flushed by sessions that have ended: first
    waits (at most SESSIONS_GONE_WITHIN seconds) until no other backend is left in the database,
    since a backend reports a deadlock it met when it exits or at its next idle flush, and a
    closed connection returns before its backend has exited."""
    with connect(url, application_name="deadlock_count") as conn:
        others = "select count(*) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()"
        deadline = time.monotonic() + SESSIONS_GONE_WITHIN
        while one(conn, others) and time.monotonic() < deadline:
            time.sleep(0.02)  # poll: the closed sessions' backends are exiting (a bounded wait)
        conn.execute("select pg_stat_clear_snapshot()")
        return int(one(conn, "select deadlocks from pg_stat_database where datname = current_database()") or 0)


def timeline(conn: Conn) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(completion time, run latency ms) of every completed run, and the (lease horizon,
    revoked at) interval of every claim a takeover revoked: what a fault-band chart draws."""
    runs = [
        (float(t), float(ms))
        for t, ms in conn.execute(
            "select extract(epoch from completed_at), extract(epoch from completed_at - started_at) * 1000 "
            "from engine.runs where status = 'completed' order by completed_at"
        ).fetchall()
    ]
    takeovers = [
        (float(a), float(b))
        for a, b in conn.execute(
            "select extract(epoch from lease_expires_at), extract(epoch from revoked_at) "
            "from engine.task_claims where state = 'revoked'"
        ).fetchall()
    ]
    return runs, takeovers
