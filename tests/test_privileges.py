"""Privileges: PUBLIC gets nothing in schema engine; engine_worker only runs worker functions."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import psycopg
import pytest

from evidence_lib.engine.roles import may_execute
from evidence_lib.pg.db import Conn, connect
from tests.helpers import define, scalar


def test_public_has_no_execute_and_no_schema_usage(conn: Conn) -> None:
    rows = conn.execute(
        "select p.proname, p.proacl is null or exists (select from aclexplode(p.proacl) a "
        "where a.grantee = 0) from pg_proc p where p.pronamespace = 'engine'::regnamespace"
    ).fetchall()
    assert rows and [name for name, public in rows if public] == []
    assert not scalar(
        conn,
        "select exists (select from aclexplode((select nspacl from pg_namespace "
        "where nspname = 'engine')) a where a.grantee = 0)",
    )


@pytest.fixture
def worker_login(conn: Conn) -> Iterator[str]:
    name = f"login_{secrets.token_hex(4)}"
    conn.execute(f"create role {name} login")
    conn.execute(f"grant engine_worker to {name}")
    yield name
    conn.execute(f"drop owned by {name}")
    conn.execute(f"drop role {name}")


def test_a_worker_login_can_claim_but_not_operate(conn: Conn, db_url: str, worker_login: str) -> None:
    define(conn, "shop", [("a", [])])
    conn.execute("select engine.start_flow('shop', '{}')")
    conn.execute("select pgmq.create('foreign_app')")
    with connect(db_url) as w:
        w.execute(f"set role {worker_login}")
        [msg_id] = [r[0] for r in w.execute("select msg_id from pgmq.read('shop', 30, 1)").fetchall()]
        assert len(w.execute("select * from engine.start_tasks('shop', %s)", ([msg_id],)).fetchall()) == 1
        for forbidden in (
            "select engine.start_flow('shop', '{}')",
            "select engine.create_flow('other')",
            "select engine.requeue_stalled_tasks()",
            "select engine.prune_data_older_than('1 day')",
            "update engine.runs set status = 'failed'",
            "select * from engine.runs",
            "select * from pgmq.read('foreign_app', 30, 1)",
            "select * from pgmq.a_shop",
            "select engine._task_input(gen_random_uuid(), 'a')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                w.execute(forbidden)


def test_operator_role_executes_everything_but_worker_functions(conn: Conn) -> None:
    rows = conn.execute(
        "select p.proname, has_function_privilege('engine_operator', p.oid, 'execute'), "
        "has_function_privilege('engine_worker', p.oid, 'execute') "
        "from pg_proc p where p.pronamespace = 'engine'::regnamespace"
    ).fetchall()
    for name, operator, worker in rows:
        assert (operator, worker) == (may_execute("engine_operator", name), may_execute("engine_worker", name)), name
