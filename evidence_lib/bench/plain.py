"""One plain-SQL client for every system: raw PGMQ, the released anchor, this engine's v1 and v2.

A unit is one A -> B run done by one connection with plain SQL calls, in the order a worker
would make them (raw PGMQ: one message sent, read and archived; its bound is messages / 2):

| system | round trips per run |
|---|---|
| raw PGMQ | 3 per message (send, read, archive) |
| anchor (pgflow) | 7: start_flow; per step read, start_tasks, complete_task (complete cascades) |
| v1 | 7: start_flow; per step read, start_tasks, complete_task |
| v2 | 9: v2_start_run; per step read, v2_claim, v2_settle, v2_reconcile (reconcile inline) |

Each connection has its own flow and queue (`p<i>`), so none reads another's messages. `prepare`
defines them; `unit_loop` is what a participant process runs until stopped.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

from evidence_lib.engine.flows import Flow, compile_flow
from evidence_lib.pg.db import Conn, connect
from evidence_lib.workers.timing import CallTimes

System = Literal["raw", "anchor", "v1", "v2"]
SYSTEMS: tuple[System, ...] = ("raw", "anchor", "v1", "v2")
COUNT_SQL: dict[System, str] = {
    "raw": "select coalesce(sum(n), 0) from (select count(*) as n from pgmq.a_p0 union all "
    "select count(*) from pgmq.a_p1) as c",
    "anchor": "select count(*) from pgflow.runs where status = 'completed'",
    "v1": "select count(*) from engine.runs where status = 'completed'",
    "v2": "select count(*) from engine.runs where status = 'completed'",
}


def slug(i: int) -> str:
    return f"p{i}"


def prepare(conn: Conn, system: System, connections: int) -> None:
    """Define one flow (or queue) per connection."""
    for i in range(max(connections, 2)):
        s = slug(i)
        if system == "raw":
            conn.execute("select pgmq.create(%s)", (s,))
        elif system == "anchor":
            conn.execute("select pgflow.create_flow(%s, max_attempts => 1)", (s,))
            conn.execute("select pgflow.add_step(%s, 'A')", (s,))
            conn.execute("select pgflow.add_step(%s, 'B', array['A'])", (s,))
        else:
            flow: Flow[Any] = Flow(s, max_attempts=1 if system == "v2" else 3, timeout=60)
            flow.add("A", lambda x: x).add("B", lambda x: x, deps=["A"])
            compile_flow(conn, flow)


def _one(conn: Conn, times: CallTimes, name: str, query: str, params: Any = None) -> Any:
    with times.time(name):
        row = conn.execute(query.encode(), params).fetchone()
    return None if row is None else row[0]


def _raw(conn: Conn, s: str, times: CallTimes, state: dict[str, Any]) -> None:
    _one(conn, times, "pgmq.send", "select pgmq.send(%s, '{}')", (s,))
    msg = _one(conn, times, "pgmq.read", "select msg_id from pgmq.read(%s, 30, 1)", (s,))
    _one(conn, times, "pgmq.archive", "select pgmq.archive(%s, %s::bigint)", (s, msg))


def _anchor(conn: Conn, s: str, times: CallTimes, state: dict[str, Any]) -> None:
    if "worker" not in state:
        state["worker"] = uuid.uuid4()
        conn.execute(
            "insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, 'bench')",
            (state["worker"], s),
        )
    run = _one(conn, times, "start_flow", "select run_id from pgflow.start_flow(%s, '{}'::jsonb)", (s,))
    for step in ("A", "B"):
        msg = _one(conn, times, "pgmq.read", "select msg_id from pgmq.read(%s, 30, 1)", (s,))
        start = "select count(*) from pgflow.start_tasks(%s, array[%s]::bigint[], %s)"
        _one(conn, times, "start_tasks", start, (s, msg, state["worker"]))
        complete = "select count(*) from pgflow.complete_task(%s, %s, 0, '{}'::jsonb)"
        _one(conn, times, "complete_task", complete, (run, step))


def _v1(conn: Conn, s: str, times: CallTimes, state: dict[str, Any]) -> None:
    run = _one(conn, times, "start_flow", "select engine.start_flow(%s, '{}'::jsonb)", (s,))
    for step in ("A", "B"):
        msg = _one(conn, times, "pgmq.read", "select msg_id from pgmq.read(%s, 30, 1)", (s,))
        _one(conn, times, "start_tasks", "select count(*) from engine.start_tasks(%s, array[%s]::bigint[])", (s, msg))
        _one(conn, times, "complete_task", "select (engine.complete_task(%s, %s, 0, '{}'::jsonb)).status", (run, step))


def _v2(conn: Conn, s: str, times: CallTimes, state: dict[str, Any]) -> None:
    run = _one(conn, times, "v2_start_run", "select engine.v2_start_run(%s, '{}'::jsonb)", (s,))
    for step in ("A", "B"):
        msg = _one(conn, times, "pgmq.read", "select msg_id from pgmq.read(%s, 30, 1)", (s,))
        claim_sql = "select claim_id from engine.v2_claim(%s, %s, %s, array[%s]::bigint[])"
        claim = _one(conn, times, "v2_claim", claim_sql, (run, step, s, msg))
        _one(conn, times, "v2_settle", "select verdict from engine.v2_settle(%s, 'completed', '{}')", (claim,))
        _one(conn, times, "v2_reconcile", "select actions from engine.v2_reconcile(%s)", (run,))


UNITS = {"raw": _raw, "anchor": _anchor, "v1": _v1, "v2": _v2}


def unit_loop(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    """A participant: one connection doing units of `opts['system']` on flow `p<index>`."""
    unit = UNITS[opts["system"]]
    state: dict[str, Any] = {}
    with connect(url, application_name=f"plain_{opts['system']}") as conn:
        while not stop.is_set():
            unit(conn, slug(opts["index"]), times, state)
