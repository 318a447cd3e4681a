"""The database read back in the reference model's form, and the difference between the two.

Every engine table and every queue is read after each step. A message is known by its owner
(the run and step in its body), so the model never has to guess PGMQ's ids; a task's stored
(queue, message id) must point at its own message, live or archived, or the task reads "wrong".
"""

from __future__ import annotations

import json
from typing import Any

from psycopg import sql

from evidence_lib.model.reference import _canon
from evidence_lib.pg.db import Conn

QUERIES = {
    "flows": "select f.flow_slug, f.queue_mode, s.step_slug, s.queue_name from engine.flows f "
    "join engine.steps s using (flow_slug) order by 1, 3",
    "runs": "select run_id::text, flow_slug, status, output from engine.runs where protocol = 'v2'",
    "steps": "select run_id::text, step_slug, status from engine.step_states",
    "tasks": "select run_id::text, step_slug, status, queue_name, message_id, attempts_count, "
    "infrastructure_losses, output from engine.step_tasks",
    "claims": "select claim_id::text, run_id::text, step_slug, state, attempt, replaced_by::text "
    "from engine.task_claims",
    "settlements": "select claim_id::text, outcome, result, requested_generation from engine.task_settlements",
    "work": "select run_id::text, requested_generation, processed_generation, health, consecutive_errors "
    "from engine.run_work",
    "errors": "select run_id::text, count(*) from engine.engine_errors group by 1",
}


def _messages(conn: Conn, queue: str, table: str) -> dict[int, tuple[str, str]]:
    query = sql.SQL("select msg_id, message from pgmq.{} ").format(sql.Identifier(f"{table}_{queue}"))
    out = {}
    for msg_id, body in conn.execute(query).fetchall():
        body = body if isinstance(body, dict) else json.loads(body)
        out[int(msg_id)] = (str(body.get("run_id")), str(body.get("step_slug")))
    return out


def snapshot(conn: Conn) -> dict[str, Any]:
    """The whole observable state, normalized like `Model.expected_state()`."""
    rows = {name: conn.execute(query).fetchall() for name, query in QUERIES.items()}
    flows: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    for slug, mode, step, queue in rows["flows"]:
        flows.setdefault(slug, (mode, []))[1].append((step, queue))
    queue_names = [r[0] for r in conn.execute("select queue_name from pgmq.meta order by 1").fetchall()]
    live = {q: _messages(conn, q, "q") for q in queue_names}
    archived = {q: _messages(conn, q, "a") for q in queue_names}
    queues = {
        q: dict(
            sorted({**{o: "archived" for o in archived[q].values()}, **{o: "live" for o in live[q].values()}}.items())
        )
        for q in queue_names
    }

    def message_of(run: str, step: str, queue: str, msg_id: int | None) -> str:
        if queue not in live or msg_id is None:
            return "gone"
        for state, found in (("live", live[queue]), ("archived", archived[queue])):
            if msg_id in found:
                return state if found[msg_id] == (run, step) else "wrong"
        return "gone"

    return {
        "flows": {slug: (mode, tuple(sorted(steps))) for slug, (mode, steps) in flows.items()},
        "runs": {r: (flow, status, _canon(output)) for r, flow, status, output in rows["runs"]},
        "steps": {(r, s): status for r, s, status in rows["steps"]},
        "tasks": {
            (r, s): (status, queue, message_of(r, s, queue, msg), attempts, losses, _canon(output))
            for r, s, status, queue, msg, attempts, losses, output in rows["tasks"]
        },
        "claims": {c: (r, s, state, attempt, replaced) for c, r, s, state, attempt, replaced in rows["claims"]},
        "settlements": {c: (o, _canon(result), g) for c, o, result, g in rows["settlements"]},
        "work": {r: (req, proc, health, errors) for r, req, proc, health, errors in rows["work"]},
        "errors": {r: int(n) for r, n in rows["errors"]},
        "queues": queues,
        # not compared (the model never predicts PGMQ's ids): what a worker reads from its queue
        "message_ids": {(r, s): int(msg) for r, s, _, _, msg, _, _, _ in rows["tasks"] if msg is not None},
    }


def differences(expected: dict[str, Any], seen: dict[str, Any]) -> list[str]:
    """Every row that differs, as `table key: model ... != database ...` lines."""
    out = []
    for table in expected:
        want, got = expected[table], seen.get(table, {})
        for key in sorted(set(want) | set(got), key=str):
            if want.get(key) != got.get(key):
                out.append(f"{table} {key}: model {want.get(key, '(absent)')} != database {got.get(key, '(absent)')}")
    return out
