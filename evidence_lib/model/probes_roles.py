"""Probes of the privileges: every public engine function called by each engine role and by a
role with no grant; the internal helpers, the tables and the queues touched by each. A call the
role may make gets the function's own answer (with arguments it refuses or that write nothing);
any other gets 42501. The expected grants are the contract's (section 6), not the catalog's."""

from __future__ import annotations

import contextlib
from typing import Any

import psycopg

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.model.ops import Op
from evidence_lib.model.ops_more import as_role
from evidence_lib.model.probes_defs import Checker
from evidence_lib.model.reference import Outcome
from evidence_lib.model.state import INSUFFICIENT_PRIVILEGE
from evidence_lib.pg.db import Server

UNKNOWN = "00000000-0000-4000-8000-0000000000bb"
ALLOWED = Outcome("value", "allowed")
NOBODY = "engine_model_nobody"
WORKER_CALLS = {  # CONTRACT 6: what engine_worker may execute
    "select * from engine.start_tasks('zz_no_queue', array[1]::bigint[])": ALLOWED,
    f"select engine.complete_task('{UNKNOWN}', 'x', 0, '{{}}')": Outcome.error(SqlState.UNKNOWN_OBJECT),
    f"select engine.fail_task('{UNKNOWN}', 'x', 0, 'e')": Outcome.error(SqlState.UNKNOWN_OBJECT),
    f"select * from engine.v2_claim('{UNKNOWN}', 'x', 'q', array[1]::bigint[])": Outcome.error(SqlState.UNKNOWN_OBJECT),
    f"select engine.v2_settle('{UNKNOWN}', 'completed', '{{}}')": Outcome.error(SqlState.UNKNOWN_CLAIM),
    "select * from engine.v2_claim_all(null, null, null, null)": Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE),
    "select * from engine.v2_settle_all(null, null, null)": Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE),
}
OPERATOR_CALLS = {  # and engine_operator everything else of the API
    "select engine.create_flow('bad-slug')": Outcome.error(SqlState.UNSUPPORTED_DEFINITION),
    "select engine.add_step('nope', 'x')": Outcome.error(SqlState.UNKNOWN_OBJECT),
    "select engine.delete_flow('nope')": Outcome.error(SqlState.UNKNOWN_OBJECT),
    "select engine.start_flow('nope', '{}')": Outcome.error(SqlState.UNKNOWN_OBJECT),
    "select engine.requeue_stalled_tasks()": ALLOWED,
    "select engine.prune_data_older_than(null)": Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE),
    "select engine.v2_limits()": ALLOWED,
    "select engine.v2_start_run('nope', '{}')": Outcome.error(SqlState.UNKNOWN_OBJECT),
    f"select * from engine.v2_take_over('{UNKNOWN}', 'x', '{UNKNOWN}', 'q', array[1]::bigint[])": Outcome.error(
        SqlState.UNKNOWN_OBJECT),
    f"select engine.v2_reconcile('{UNKNOWN}')": Outcome.error(SqlState.UNKNOWN_OBJECT),
    "select * from engine.v2_reconcile_next(0)": Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE),
    "select * from engine.v2_reconcile_all(null)": Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE),
}  # fmt: skip
BOTH_CALLS = {  # both engine roles may wait for wake-ups
    "select engine.v2_listen('nope')": Outcome.error(SqlState.UNKNOWN_OBJECT),
    "select engine.v2_unlisten('nope')": ALLOWED,
}
NOBODY_CALLS = [  # internal helpers and tables: no engine role may touch them directly
    "select engine._now()",
    "select engine._v2_envelope()",
    "select engine._hook('x')",
    "select count(*) from engine.runs",
    "update engine.flows set timeout = timeout where false",
    "delete from engine.task_claims where false",
]


def ensure_nobody(server: Server) -> None:
    """Create the role with no grant once, committed, before any history runs: a role is a
    cluster-wide object, and creating it inside a history's transaction (the mutation oracle's,
    always rolled back) made every other session that needed it wait for that transaction: two
    jobs side by side timed each other out. A concurrent creator is fine (already there)."""
    with server.admin() as conn, contextlib.suppress(psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
        conn.execute(f"create role {NOBODY} nologin")


def _nobody_exists() -> Op:
    from evidence_lib.model.ops import Op as _Op

    def real(conn: Any) -> tuple[Outcome, Any]:
        row = conn.execute("select exists (select from pg_catalog.pg_roles where rolname = %s)", (NOBODY,)).fetchone()
        return (ALLOWED if row and row[0] else Outcome.error("no role")), None

    return _Op("role", f"a role {NOBODY} with no grant (created before the histories)", real,
               lambda m, ids, now: ALLOWED)  # fmt: skip


def roles(m: Checker, engine_queue: str, foreign_queue: str) -> None:
    m.check(_nobody_exists())
    denied = Outcome.error(INSUFFICIENT_PRIVILEGE)
    for role in ("engine_worker", "engine_operator", NOBODY):
        for statement, answer in WORKER_CALLS.items():
            m.check(as_role(role, statement, (), answer if role == "engine_worker" else denied))
        for statement, answer in OPERATOR_CALLS.items():
            m.check(as_role(role, statement, (), answer if role == "engine_operator" else denied))
        for statement, answer in BOTH_CALLS.items():
            m.check(as_role(role, statement, (), answer if role != NOBODY else denied))
        for statement in NOBODY_CALLS:
            m.check(as_role(role, statement, (), denied))
        read = "select * from pgmq.read(%s, 0, 0)"
        m.check(as_role(role, read, (engine_queue,), ALLOWED if role == "engine_worker" else denied))
        m.check(as_role(role, read, (foreign_queue,), denied))
