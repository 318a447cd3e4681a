"""A worker's own reconciler (`workers/followup.py`), on the real engine: the runs handed to it
are reconciled in one call, each once however often handed; a refused run is said and stays
dirty; a server it cannot reach leaves the runs dirty for any reconciler; close stops it."""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from psycopg import conninfo

from evidence_lib.engine import v2
from evidence_lib.engine.flows import route
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.pg.db import Conn
from evidence_lib.workers.followup import FollowUp

DEAD = "postgresql://postgres@/postgres?host=/nonexistent-socket-dir"
GUARD = 10.0  # seconds: a liveness guard only


class Said:
    """The log the worker hands its follow-up reconciler: each (level, event, message, fields)."""

    def __init__(self) -> None:
        self.lines: list[tuple[int, str, str, dict[str, Any]]] = []
        self.changed = threading.Event()

    def __call__(self, level: int, event: str, message: str, **fields: Any) -> None:
        self.lines.append((level, event, message, fields))
        self.changed.set()


def _settled(conn: Conn, slug: str, n: int) -> list[UUID]:
    flow = define_ab(conn, slug, "flow")
    runs = []
    for i in range(n):
        run_id = v2.start_run(conn, slug, {"n": i})
        grant = v2.claim(conn, run_id, "A", route(flow, "A"), read_step_message(conn, flow, "A", run_id))
        assert grant is not None
        v2.settle(conn, grant.claim_id, "completed", {"a": i})
        runs.append(run_id)
    return runs


def _until(condition: Callable[[], bool]) -> bool:
    pause = threading.Event()
    for _ in range(int(GUARD / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return False


def _processed(conn: Conn, run_id: UUID) -> int:
    return int(v2.work_row(conn, run_id)["processed_generation"])


def test_the_runs_handed_over_are_reconciled_once_each_in_one_call(conn: Conn, db_url: str) -> None:
    runs = _settled(conn, "fu", 3)
    said = Said()
    followup = FollowUp(db_url, "t_fu", said)
    try:
        followup.hand([runs[0], runs[1], runs[0], runs[2], runs[1]])
        assert _until(lambda: followup.calls == 1), "the handed runs were never reconciled"
        assert followup.reconciled == 3 and not followup.disabled
        assert [_processed(conn, r) for r in runs] == [1, 1, 1]
        assert said.lines == []
    finally:
        followup.close()
    assert not followup._thread.is_alive()


def test_a_refused_run_is_said_and_stays_dirty_while_the_others_are_reconciled(conn: Conn, db_url: str) -> None:
    [broken] = _settled(conn, "fubroken", 1)
    [healthy] = _settled(conn, "fuhealthy", 1)
    conn.execute("update engine.steps set timeout = 9 where flow_slug = 'fubroken' and step_slug = 'B'")
    said = Said()
    followup = FollowUp(db_url, "t_furef", said)
    try:
        followup.hand([broken, healthy])
        assert _until(lambda: followup.calls == 1)
    finally:
        followup.close()
    assert _processed(conn, healthy) == 1 and _processed(conn, broken) == 0
    [(level, event, message, fields)] = said.lines
    assert (level, event, fields) == (logging.WARNING, "followup_refused", {"run_id": str(broken)})
    assert f"run {broken}: reconcile refused [DR" in message and "stays dirty for any reconciler" in message


def test_a_server_it_cannot_reach_leaves_the_runs_dirty_and_says_so(conn: Conn, db_url: str) -> None:
    [run_id] = _settled(conn, "fudead", 1)
    said = Said()
    followup = FollowUp(DEAD, "t_fudead", said)
    try:
        followup.hand([run_id])
        assert said.changed.wait(GUARD)
    finally:
        followup.close()
    [(level, event, message, _)] = said.lines
    assert (level, event) == (logging.WARNING, "followup_failed")
    assert message.startswith("reconciling 1 runs failed (") and message.endswith("they stay dirty for any reconciler")
    assert followup.calls == 0 and followup.reconciled == 0 and followup._conn is None
    assert _processed(conn, run_id) == 0


def test_a_role_that_may_not_reconcile_stops_it_for_good_and_says_so(conn: Conn, db_url: str) -> None:
    [run_id] = _settled(conn, "furole", 1)
    name = f"login_{secrets.token_hex(4)}"
    conn.execute(f"create role {name} login")
    conn.execute(f"grant engine_worker to {name}")  # a worker's role: it settles, it may not reconcile
    said = Said()
    followup = FollowUp(conninfo.make_conninfo(db_url, user=name), "t_furole", said)
    try:
        followup.hand([run_id])
        assert said.changed.wait(GUARD)
        assert followup.disabled.startswith("this role may not reconcile: ")
        followup.hand([run_id])  # ignored from now on: nothing more is tried or said
        assert not followup._runs
    finally:
        followup.close()
        conn.execute(f"drop owned by {name}")
        conn.execute(f"drop role {name}")
    [(level, event, message, _)] = said.lines
    assert (level, event) == (logging.WARNING, "followup_disabled")
    assert "the runs it settles are left to a standalone reconciler" in message
    assert followup.calls == 0 and _processed(conn, run_id) == 0
