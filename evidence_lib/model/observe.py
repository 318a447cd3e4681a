"""The database read back in the reference model's form, and the difference between the two.

Every engine table and every queue is read after each step. A message is known by its owner
(the run and step in its body), so the model never has to guess PGMQ's ids; a task's stored
(queue, message id) must point at its own message, live or archived, or the task reads "wrong".
"""

from __future__ import annotations

import json
from typing import Any

from psycopg import sql

from evidence_lib.model.state import TOLERANCE, _canon
from evidence_lib.pg.db import Conn

QUERIES = {
    "flows": "select f.flow_slug, f.queue_mode, s.step_slug, s.queue_name from engine.flows f "
    "left join engine.steps s using (flow_slug) order by 1, 3",
    "options": "select f.flow_slug, f.max_attempts, f.base_delay, f.timeout, s.step_slug, s.max_attempts, "
    "s.base_delay, s.timeout, s.start_delay, coalesce((select array_agg(d.dep_slug order by d.dep_slug) "
    "from engine.deps d where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug), '{}') "
    "from engine.flows f left join engine.steps s using (flow_slug) order by f.flow_slug, s.step_index",
    "runs": "select run_id::text, flow_slug, status, output, protocol, remaining_steps from engine.runs",
    "steps": "select run_id::text, step_slug, status, remaining_deps from engine.step_states",
    # which timestamps each step state and task carries (their instants are not the model's)
    "stamps": "select run_id::text, step_slug, 'step', started_at is not null, completed_at is not null, "
    "failed_at is not null from engine.step_states union all select run_id::text, step_slug, 'task', "
    "started_at is not null, completed_at is not null, failed_at is not null from engine.step_tasks",
    "tasks": "select run_id::text, step_slug, status, queue_name, message_id, attempts_count, "
    "infrastructure_losses, output, error_message from engine.step_tasks",
    "claims": "select claim_id::text, run_id::text, step_slug, state, attempt, replaced_by::text, timeout, "
    "max_attempts, start_delay, extract(epoch from lease_expires_at)::float8 from engine.task_claims",
    "settlements": "select claim_id::text, outcome, result, requested_generation from engine.task_settlements",
    "work": "select run_id::text, requested_generation, processed_generation, health, consecutive_errors "
    "from engine.run_work",
    "next_attempts": "select run_id::text, extract(epoch from next_attempt_at)::float8 from engine.run_work",
    "listening": "select channel, true from engine.listeners where pid = pg_backend_pid()",
    "errors": "select run_id::text, count(*) from engine.engine_errors group by 1",
}


def _all_messages(conn: Conn, queue_names: list[str]) -> list[tuple[str, str, int, Any, float | None]]:
    """Every message of every queue in one round trip: (queue, "q" or "a", id, body, vt)."""
    if not queue_names:
        return []
    parts = [
        sql.SQL("select {}::text, {}::text, msg_id, message, {} from pgmq.{}").format(
            sql.Literal(q), sql.Literal(table),
            sql.SQL("extract(epoch from vt)::float8" if table == "q" else "null::float8"),
            sql.Identifier(f"{table}_{q}"))
        for q in queue_names for table in ("q", "a")
    ]  # fmt: skip
    return [tuple(r) for r in conn.execute(sql.SQL(" union all ").join(parts)).fetchall()]


def snapshot(conn: Conn) -> dict[str, Any]:
    """The whole observable state, normalized like `Model.expected_state()`."""
    rows = {name: conn.execute(query).fetchall() for name, query in QUERIES.items()}
    flows: dict[str, tuple[str, list[tuple[str, str]]]] = {}
    for slug, mode, step, queue in rows["flows"]:
        steps_of = flows.setdefault(slug, (mode, []))[1]
        if step is not None:
            steps_of.append((step, queue))
    queue_names = [r[0] for r in conn.execute("select queue_name from pgmq.meta order by 1").fetchall()]
    vts: dict[tuple[str, int], float] = {}
    live: dict[str, dict[int, tuple[str, str]]] = {q: {} for q in queue_names}
    archived: dict[str, dict[int, tuple[str, str]]] = {q: {} for q in queue_names}
    for queue, table, msg_id, body, vt in _all_messages(conn, queue_names):
        body = body if isinstance(body, dict) else json.loads(body)
        owner = (str(body.get("run_id")), str(body.get("step_slug")))
        (live if table == "q" else archived)[queue][int(msg_id)] = owner
        if vt is not None:
            vts[(queue, int(msg_id))] = float(vt)
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

    options: dict[str, Any] = {}
    for slug, ma, bd, to, step, sma, sbd, sto, ssd, deps in rows["options"]:
        steps_of = options.setdefault(slug, (ma, bd, to, []))[3]
        if step is not None:
            steps_of.append((step, sma, sbd, sto, ssd, tuple(deps)))
    return {
        "flows": {slug: (mode, tuple(sorted(steps))) for slug, (mode, steps) in flows.items()},
        "options": {slug: (ma, bd, to, tuple(steps)) for slug, (ma, bd, to, steps) in options.items()},
        "runs": {r: (flow, status, _canon(output), protocol, remaining)
                 for r, flow, status, output, protocol, remaining in rows["runs"]},
        "steps": {(r, s): (status, deps) for r, s, status, deps in rows["steps"]},
        "stamps": {(r, s, kind): tuple(flags) for r, s, kind, *flags in rows["stamps"]},
        "tasks": {
            (r, s): (status, queue, message_of(r, s, queue, msg), attempts, losses, _canon(output), error)
            for r, s, status, queue, msg, attempts, losses, output, error in rows["tasks"]
        },
        "claims": {c: tuple(rest[:-1]) for c, *rest in rows["claims"]},
        "vt": {(r, s): vts[(queue, int(msg))] for r, s, _, queue, msg, *_ in rows["tasks"]
               if msg is not None and (queue, int(msg)) in vts and message_of(r, s, queue, msg) == "live"},
        "leases": {c: float(lease) for c, *_, lease in rows["claims"]},
        "next_attempts": {r: None if at is None else float(at) for r, at in rows["next_attempts"]},
        "listening": dict(rows["listening"]),
        "settlements": {c: (o, _canon(result), g) for c, o, result, g in rows["settlements"]},
        "work": {r: (req, proc, health, errors) for r, req, proc, health, errors in rows["work"]},
        "errors": {r: int(n) for r, n in rows["errors"]},
        "queues": queues,
        # not compared (the model never predicts PGMQ's ids): what a worker reads from its queue
        "message_ids": {(r, s): int(msg) for r, s, _, _, msg, *_ in rows["tasks"] if msg is not None},
    }


INSTANTS = ("vt", "leases", "next_attempts")  # the model holds a window [earliest, latest]; the database one instant


def _agrees(table: str, want: Any, got: Any) -> bool:
    if table in INSTANTS and want is not None and got is not None:
        return bool(want[0] - TOLERANCE <= got <= want[1] + TOLERANCE)
    return bool(want == got)


def differences(expected: dict[str, Any], seen: dict[str, Any]) -> list[str]:
    """Every row that differs, as `table key: model ... != database ...` lines (an instant
    differs when it lies outside the model's window)."""
    out = []
    for table in expected:
        want, got = expected[table], seen.get(table, {})
        for key in sorted(set(want) | set(got), key=str):
            if not _agrees(table, want.get(key), got.get(key)):
                out.append(f"{table} {key}: model {want.get(key, '(absent)')} != database {got.get(key, '(absent)')}")
    return out
