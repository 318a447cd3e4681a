"""Engine <-> queue consistency, read back after a scenario step: the classes of bug the engine
this is modelled on shipped (task status and queue state disagreeing, messages never archived).

Rules, over the engine's tasks and runs and every message "of ours" (a JSON object with
`protocol`, `run_id` and `step_slug`; anything else in a queue is someone else's):
1. a task that is not terminal and has a message id has exactly one message of ours, live, in
   its snapshot queue, carrying its identity;
2. a terminal task's message is archived (in its snapshot queue's archive) and not live;
3. no message of ours (one naming a run the engine has) is live without a task that snapshots
   it (messages naming no known run are someone else's and are left intact by contract);
4. a terminal run holds no live message of ours.
Scenarios call `check` after their steps; `gates` turns the checks into one gate per mode.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from psycopg import sql

from evidence_lib.pg.db import Conn
from evidence_lib.results.scenario import ScenarioResult

TABLE = "consistency_checks"
GATE = "engine_and_queues_agree_after_every_step"
TERMINAL_TASK = ("completed", "failed", "cancelled")
TERMINAL_RUN = ("completed", "failed")


def _messages(conn: Conn, kind: str) -> list[tuple[str, int, str, str]]:
    """(queue, msg_id, run_id, step_slug) of every message of ours in every queue (kind 'q')
    or archive (kind 'a')."""
    out: list[tuple[str, int, str, str]] = []
    queues = [str(r[0]) for r in conn.execute("select queue_name from pgmq.meta order by 1").fetchall()]
    for queue in queues:
        table = sql.Identifier(f"{kind}_{queue.lower()}")
        exists = conn.execute("select to_regclass(%s)", (f"pgmq.{kind}_{queue.lower()}",)).fetchone()
        if exists is None or exists[0] is None:
            continue
        rows = conn.execute(
            sql.SQL(
                "select msg_id, message->>'run_id', message->>'step_slug' from pgmq.{} "
                "where jsonb_typeof(message) = 'object' and message ? 'protocol' and message ? 'run_id' "
                "and message ? 'step_slug'"
            ).format(table)
        ).fetchall()
        out += [(queue.lower(), int(m), str(r), str(s)) for m, r, s in rows]
    return out


def violations(conn: Conn) -> list[str]:
    """Every broken rule, one line each (empty: the engine and the queues agree)."""
    live = _messages(conn, "q")
    archived = {(q, m) for q, m, _, _ in _messages(conn, "a")}
    live_at = Counter((q, m) for q, m, _, _ in live)
    identity = {(q, m): (r, s) for q, m, r, s in live}
    tasks = conn.execute(
        "select run_id::text, step_slug, status, lower(queue_name), message_id "
        "from engine.step_tasks where message_id is not null"
    ).fetchall()
    out: list[str] = []
    snapshots = set()
    for run_id, step, status, queue, msg_id in tasks:
        pair = (queue, int(msg_id))
        snapshots.add(pair)
        name = f"task {run_id}/{step} ({status}, message {queue}#{msg_id})"
        if status in TERMINAL_TASK:
            if live_at[pair]:
                out.append(f"{name}: terminal but its message is still live")
            elif pair not in archived:
                out.append(f"{name}: terminal but its message is not archived")
        elif live_at[pair] != 1:
            out.append(f"{name}: {live_at[pair]} live message(s) in its snapshot queue, expected 1")
        elif identity[pair] != (run_id, step):
            out.append(f"{name}: the live message carries {identity[pair]}")
    runs = {str(r[0]): str(r[1]) for r in conn.execute("select run_id::text, status from engine.runs")}
    for queue, msg_id, run_id, step in live:
        if run_id in runs and (queue, msg_id) not in snapshots:
            out.append(f"message {queue}#{msg_id} ({run_id}/{step}) is live without a task")
    terminal = {r: s for r, s in runs.items() if s in TERMINAL_RUN}
    for queue, msg_id, run_id, step in live:
        if run_id in terminal:
            out.append(f"run {run_id} is {terminal[run_id]} but holds live message {queue}#{msg_id} ({step})")
    return out


def check(result: ScenarioResult, conn: Conn, mode: str, where: str) -> list[str]:
    """Check the rules now and record the outcome (a row of `consistency_checks`)."""
    found = violations(conn)
    result.append_rows(TABLE, [{"mode": mode, "after": where, "violations": len(found), "detail": "; ".join(found)}])
    return found


def gates(result: ScenarioResult) -> None:
    """One gate per mode over every check recorded in `result` (none recorded: red)."""
    frame = result.tables.get(TABLE)
    records: list[dict[str, Any]] = (
        [] if frame is None else [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")]
    )
    for mode in sorted({str(r["mode"]) for r in records}) or [""]:
        mine = [r for r in records if str(r["mode"]) == mode]
        bad = [r for r in mine if int(r["violations"])]
        result.gate(
            GATE,
            bool(mine) and not bad,
            f"{len(mine)} checks, {len(bad)} with violations"
            + (f"; first after '{bad[0]['after']}': {bad[0]['detail'][:300]}" if bad else ""),
            mode,
        )
