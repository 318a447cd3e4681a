"""More operations, each on the engine and on the model: the definition functions called
directly, the v1 engine, and the probes a careful reviewer would run by hand: calls under each
engine role, test hooks armed to fail, a foreign PGMQ queue, and superuser writes that age a task
or change a definition behind the engine's back (each named as such in the transcript)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from evidence_lib.model.ops import Op, call
from evidence_lib.model.reference import Model, Outcome, Window, _canon
from evidence_lib.pg.db import Conn


def real_time(m: Model, window: Window) -> Window:
    """v1 reads clock_timestamp(): the window without the test clock's offset."""
    return (window[0] - m.offset, window[1] - m.offset)


def _row(conn: Conn, query: str, params: Any) -> tuple[Any, ...] | None:
    row = conn.execute(query, params).fetchone()
    return None if row is None else tuple(row)


def create_flow(slug: str | None, max_attempts: int | None = 1, base_delay: int | None = 1, timeout: int | None = 30,
                mode: str | None = "flow") -> Op:  # fmt: skip
    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (Outcome("value", _row(conn, "select flow_slug, max_attempts, base_delay, timeout, "
                                   "queue_mode from engine.create_flow(%s, %s, %s, %s, %s)",
                                   (slug, max_attempts, base_delay, timeout, mode))), None))  # fmt: skip

    return Op("create_flow", f"create_flow {slug} (max_attempts {max_attempts}, base_delay {base_delay}, "
              f"timeout {timeout}, {mode})", real,
              lambda m, ids, now: m.create_flow(slug, max_attempts, base_delay, timeout, mode))  # fmt: skip


def add_step(flow: str, step: str | None, deps: Sequence[str | None] | None = None, max_attempts: int | None = None,
             base_delay: int | None = None, timeout: int | None = None,
             start_delay: int | None = None) -> Op:  # fmt: skip
    args = (flow, step, list(deps) if deps is not None else [], max_attempts, base_delay, timeout, start_delay)

    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (Outcome("value", _row(conn, "select flow_slug, step_slug, step_index, deps_count, "
                                   "max_attempts, base_delay, timeout, start_delay, queue_name from engine.add_step("
                                   "%s, %s, %s::text[], %s, %s, %s, %s)", args)), None))  # fmt: skip

    return Op("add_step", f"add_step {flow}.{step} deps {deps} (max_attempts {max_attempts}, base_delay {base_delay}, "
              f"timeout {timeout}, start_delay {start_delay})", real,
              lambda m, ids, now: m.add_step(*args))  # fmt: skip


def delete_flow(slug: str) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (conn.execute("select engine.delete_flow(%s)", (slug,)), (Outcome("value", None),
                                                                                            None))[1])  # fmt: skip

    return Op("delete_flow", f"delete_flow {slug}", real, lambda m, ids, now: m.delete_flow(slug))


def start_flow(slug: str, input: Any, sql_null: bool = False) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            value = None if sql_null else Jsonb(input)
            row = conn.execute("select engine.start_flow(%s, %s)", (slug, value)).fetchone()
            return Outcome("value", "run"), str(row[0]) if row else None

        return call(conn, go)

    return Op("start_flow", f"v1 start_flow {slug} input {'SQL NULL' if sql_null else input}", real,
              lambda m, run_id, now: m.start_flow(slug, input, run_id, real_time(m, now), sql_null))  # fmt: skip


def start_tasks(queue: str, ids: list[int], owners: list[tuple[str, str]], label: str = "") -> Op:
    """v1 start_tasks for `ids` (the message ids of `owners`, plus any the caller adds)."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute("select run_id::text, step_slug, input from engine.start_tasks(%s, %s::bigint[])",
                                (queue, ids)).fetchall()  # fmt: skip
            return Outcome("value", tuple(sorted((r, s, _canon(i)) for r, s, i in rows))), None

        return call(conn, go)

    return Op("start_tasks", f"v1 start_tasks {queue} {ids} {label}".strip(), real,
              lambda m, _, now: m.start_tasks(queue, owners, real_time(m, now)))  # fmt: skip


def _task_row(conn: Conn, query: str, params: Any) -> Outcome:
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return Outcome("value", (row[0], row[1], _canon(row[2]), row[3]))


def complete_task(run: str, step: str, output: Any, index: int = 0, sql_null: bool = False) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (_task_row(conn, "select status, attempts_count, output, error_message from "
                                   "engine.complete_task(%s, %s, %s, %s)",
                                   (run, step, index, None if sql_null else Jsonb(output))), None))  # fmt: skip

    return Op("complete_task", f"v1 complete_task {step}[{index}] of {run[:8]} output {output}", real,
              lambda m, ids, now: m.complete_task(run, step, index, output, real_time(m, now), sql_null),
              run)  # fmt: skip


def fail_task(run: str, step: str, message: str, index: int = 0) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (_task_row(conn, "select status, attempts_count, output, error_message from "
                                   "engine.fail_task(%s, %s, %s, %s)", (run, step, index, message)), None))  # fmt: skip

    return Op("fail_task", f"v1 fail_task {step}[{index}] of {run[:8]} ({message})", real,
              lambda m, ids, now: m.fail_task(run, step, index, message, real_time(m, now)), run)  # fmt: skip


def requeue_stalled() -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (Outcome("value", _row(conn, "select engine.requeue_stalled_tasks()", ())[0]),  # type: ignore[index]
                                   None))  # fmt: skip

    return Op("requeue_stalled", "v1 requeue_stalled_tasks", real,
              lambda m, ids, now: m.requeue_stalled(real_time(m, now)))  # fmt: skip


def prune(retention: float | None) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        arg = None if retention is None else f"{retention} seconds"
        return call(conn, lambda: (Outcome("value", _row(conn, "select engine.prune_data_older_than(%s::interval)",
                                                         (arg,))[0]), None))  # type: ignore[index]  # fmt: skip

    return Op("prune", f"prune_data_older_than {retention} s", real,
              lambda m, ids, now: m.prune(retention, real_time(m, now)))  # fmt: skip


def age(run: str, step: str, seconds: float) -> Op:
    """A superuser moves a v1 task's started_at back: time passes without waiting."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        conn.execute("update engine.step_tasks set started_at = started_at - make_interval(secs => %s) "
                     "where run_id = %s and step_slug = %s", (seconds, run, step))  # fmt: skip
        return Outcome("value", None), None

    return Op("age", f"(superuser) age {step} of {run[:8]} by {seconds} s", real,
              lambda m, ids, now: m.age(run, step, seconds), run)  # fmt: skip


def listen(channel: str | None) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (conn.execute("select engine.v2_listen(%s)", (channel,)), (Outcome("value", None),
                                                                                            None))[1])  # fmt: skip

    return Op("listen", f"v2_listen {channel}", real, lambda m, ids, now: m.listen(channel))


def unlisten(channel: str | None) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (conn.execute("select engine.v2_unlisten(%s)", (channel,)), (Outcome("value", None),
                                                                                              None))[1])  # fmt: skip

    return Op("unlisten", f"v2_unlisten {channel}", real, lambda m, ids, now: m.unlisten(channel))


def foreign_queue(name: str) -> Op:
    """A queue another application created in PGMQ (the engine must not claim its name)."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        conn.execute("select pgmq.create(%s)", (name,))
        return Outcome("value", None), None

    def model(m: Model, ids: Any, now: Window) -> Outcome:
        m.foreign.add(name.lower())
        return Outcome("value", None)

    return Op("foreign_queue", f"(another application) pgmq.create {name}", real, model)


@contextmanager
def _setting(conn: Conn, name: str, value: str) -> Iterator[None]:
    conn.execute(sql.SQL("select set_config({}, {}, false)").format(sql.Literal(name), sql.Literal(value)))
    try:
        yield
    finally:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.INERROR:
            conn.execute(sql.SQL("select set_config({}, '', false)").format(sql.Literal(name)))


def armed(point: str, op: Op) -> Op:
    """`op` with the test hook `point` armed to fail (`engine.hooks = 'point:fail'`)."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        with _setting(conn, "engine.hooks", f"{point}:fail"):
            return op.real(conn)

    def model(m: Model, ids: Any, now: Window) -> Outcome:
        m.armed.add(point)
        try:
            return op.apply(m, ids, now)
        finally:
            m.armed.discard(point)

    return Op(op.name, f"{op.text} [hook {point} armed to fail]", real, model, op.run, dict(op.meta))


def as_role(role: str, statement: str, params: Any, allowed: Outcome) -> Op:
    """`statement` run by a session whose role is `role`: refused (42501) unless the role holds
    the privilege, when it gets `allowed` (the function's own refusal or value: no write)."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            conn.execute(sql.SQL("set role {}").format(sql.Identifier(role)))
            try:
                rows = conn.execute(statement, params).fetchall()
            finally:
                if conn.info.transaction_status != psycopg.pq.TransactionStatus.INERROR:
                    conn.execute("reset role")
            return Outcome("value", len(rows) if allowed.value == "rows" else "allowed"), None

        out = call(conn, go)
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            conn.execute("reset role")
        return out

    return Op("as_role", f"as {role}: {statement}", real, lambda m, ids, now: allowed)
