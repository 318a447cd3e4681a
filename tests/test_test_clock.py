"""The test clock (`engine._now()`, setting `engine.clock_offset`): inert when unset, moves v2
time for a superuser session only."""

from __future__ import annotations

import secrets

import psycopg
import pytest
from psycopg import conninfo

from evidence_lib.engine import v2
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.pg.db import Conn, connect, one
from tests.helpers import assert_refused


def test_unset_the_clock_is_the_server_clock(conn: Conn) -> None:
    skew = one(conn, "select abs(extract(epoch from engine._now() - clock_timestamp()))")
    assert skew < 0.1


def test_an_offset_moves_a_takeover_past_the_lease_without_waiting(conn: Conn) -> None:
    flow = define_ab(conn, "clock", "flow")
    run_id = v2.start_run(conn, "clock", {})
    msg = read_step_message(conn, flow, "A", run_id)
    grant = v2.claim(conn, run_id, "A", "clock", msg)
    assert grant is not None
    take = "select * from engine.v2_take_over(%s, 'A', %s, 'clock', array[%s]::bigint[])"
    assert_refused(conn, take, (run_id, grant.claim_id, msg), SqlState.TAKEOVER_BEFORE_HORIZON)
    conn.execute("set engine.clock_offset = '1 minute'")
    assert len(conn.execute(take, (run_id, grant.claim_id, msg)).fetchall()) == 1


def test_only_a_superuser_session_may_set_the_offset(conn: Conn, db_url: str) -> None:
    name = f"op_{secrets.token_hex(4)}"
    conn.execute(f"create role {name} login password 'x'")
    conn.execute(f"grant engine_operator to {name}")
    define_ab(conn, "clock2", "flow")
    try:
        with connect(conninfo.make_conninfo(db_url, user=name, password="x")) as op:
            op.execute("set engine.clock_offset = '1 hour'")
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="clock_offset"):
                op.execute("select engine.v2_start_run('clock2', '{}')")
    finally:
        conn.execute(f"drop owned by {name}")
        conn.execute(f"drop role {name}")
