"""The operations of a history as the real engine runs them, each paired with the model's.

An `Op` knows how to call the engine on one session (`real`, returning the answer normalized
like the model's `Outcome` plus the ids the server chose) and how to apply itself to a model
(`apply`, given those ids). The checker never lets the model read the database: ids are the
only thing the server's answer gives the model (a run id, a claim id), as a client would learn
them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from evidence_lib.engine.flows import (
    AnyFlow,
    Flow,
    FlowMismatch,
    StepQueuedFlow,
    compile_flow,
    route,
    with_step_queues,
)
from evidence_lib.harness.ab_flow import identity
from evidence_lib.model.bench import OutOfTime
from evidence_lib.model.reference import FlowDef, Model, Outcome, Window, _canon
from evidence_lib.model.state import StepDef
from evidence_lib.pg.db import Conn

TIMEOUT = 30  # every model flow's timeout (s): a lease is 32 s of the engine's clock
SHAPES = ("ab", "ab_attempts_2", "abc")


def build_flow(slug: str, mode: str, shape: str) -> AnyFlow:
    flow: Flow[str] = Flow(slug, max_attempts=2 if shape == "ab_attempts_2" else 1, base_delay=1, timeout=TIMEOUT)
    flow.add("A", identity).add("B", identity, deps=["A"])
    if shape == "abc":
        flow.add("C", identity, deps=["B"])
    return with_step_queues(flow) if mode == "step" else flow


def flow_def(slug: str, mode: str, shape: str) -> FlowDef:
    return model_of(build_flow(slug, mode, shape), shape)


def model_of(flow: AnyFlow, shape: str) -> FlowDef:
    """A client-side flow definition as the model's FlowDef."""
    base = flow.flow if isinstance(flow, StepQueuedFlow) else flow
    defs = {s.slug: StepDef(s.slug, tuple(s.deps), s.max_attempts, s.base_delay, s.timeout, s.start_delay, i,
                            route(flow, s.slug)) for i, s in enumerate(base.steps)}  # fmt: skip
    return FlowDef(base.slug, flow.queue_mode, shape, {s: route(flow, s) for s in flow.step_slugs}, base.timeout,
                   base.max_attempts, base.base_delay, defs)  # fmt: skip


@dataclass
class Op:
    """One operation: its name (for transcripts and coverage), the target run (if any), the
    call on a session, and its application to a model."""

    name: str
    text: str
    real: Callable[[Conn], tuple[Outcome, Any]]
    apply: Callable[[Model, Any, Window], Outcome]
    run: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


QUERY_CANCELED = "57014"  # statement_timeout: the oracle's liveness guard, a Timeout verdict


RAISED: ContextVar[list[str] | None] = ContextVar("raised", default=None)
"""While set to a list (the mutation reach oracle), every error an engine call raises adds its
message and context there: the function it was refused or the frames it passed through, which no
function statistics count."""


def note_raised(exc: psycopg.Error) -> None:
    """Tell the reach oracle (when it listens) what an engine call or a probe's write raised."""
    if (raised := RAISED.get()) is not None:
        raised.append(f"{exc.diag.message_primary or ''}\n{exc.diag.context or ''}")


def call(conn: Conn, fn: Callable[[], tuple[Outcome, Any]]) -> tuple[Outcome, Any]:
    """Run one engine call; an error becomes the model's error outcome (its SQLSTATE). Inside
    an open transaction (the single-session oracle) the call is a savepoint: a refusal undoes
    only the call, as a rolled-back transaction would."""
    try:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS:
            with conn.transaction():
                return fn()
        return fn()
    except FlowMismatch:
        return Outcome.error("mismatch"), None
    except psycopg.Error as exc:
        note_raised(exc)
        if exc.sqlstate == QUERY_CANCELED:
            raise OutOfTime(f"a statement ran past statement_timeout: {str(exc).splitlines()[0]}") from exc
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.INERROR:
            conn.rollback()
        return Outcome.error(exc.sqlstate or type(exc).__name__), None


def _size(value: Any) -> int:
    return len(json.dumps(value).encode()) if value is not None else 0


def define(slug: str, mode: str, shape: str) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (Outcome("value", slug) if compile_flow(conn, build_flow(slug, mode, shape))
                                   else Outcome("empty"), None))  # fmt: skip

    return Op("define", f"define {slug} ({mode} queues, shape {shape})", real,
              lambda m, ids, now: m.define(flow_def(slug, mode, shape)))  # fmt: skip


def start_run(slug: str, input: Any, sql_null: bool = False) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            row = conn.execute(
                "select engine.v2_start_run(%s, %s)", (slug, None if sql_null else Jsonb(input))
            ).fetchone()
            return Outcome("value", "run"), str(row[0]) if row else None

        return call(conn, go)

    shown = "SQL NULL" if sql_null else f"{_size(input)} bytes" if _size(input) > 1000 else json.dumps(input)
    return Op("start_run", f"start_run {slug} input {shown}", real,
              lambda m, run_id, now: m.start_run(slug, input, _size(input), run_id, now, sql_null))  # fmt: skip


def claim(run: str, step: str, queue: str, ids: list[Any], msg: int | None, variant: str) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute("select claim_id::text, input from engine.v2_claim(%s, %s, %s, %s::bigint[])",
                                (run, step, queue, ids)).fetchall()  # fmt: skip
            return (Outcome("value", ("grant", _canon(rows[0][1]))), rows[0][0]) if rows else (Outcome("empty"), None)

        return call(conn, go)

    return Op("claim", f"claim {step} of {run[:8]} ({variant}: {queue} {ids})", real,
              lambda m, claim_id, now: m.claim(run, step, queue, ids, msg, now, claim_id), run)  # fmt: skip


def take_over(run: str, step: str, expected: str, queue: str, msg: int | None, variant: str) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute(
                "select claim_id::text, input from engine.v2_take_over(%s, %s, %s, %s, array[%s]::bigint[])",
                (run, step, expected, queue, msg),
            ).fetchall()
            return (Outcome("value", ("grant", _canon(rows[0][1]))), rows[0][0]) if rows else (Outcome("empty"), None)

        return call(conn, go)

    def model(m: Model, claim_id: Any, now: Window) -> Outcome:
        return m.take_over(run, step, expected, queue, [msg], msg, now, claim_id)

    return Op("take_over", f"take_over {step} of {run[:8]} from claim {expected[:8]} ({variant})", real, model, run)


def settle(claim_id: str, outcome: str | None, result: Any, variant: str, run: str | None) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            row = conn.execute(
                "select verdict, outcome, result, generation, claim_id::text from engine.v2_settle(%s, %s, %s)",
                (claim_id, outcome, None if variant == "sql_null" else Jsonb(result)),
            ).fetchone()
            assert row is not None
            # every receipt names the claim it settles (CONTRACT 5): a receipt of another is a
            # verdict the model never gives
            verdict = row[0] if row[4] == claim_id else f"{row[0]} (a receipt naming {row[4]})"
            return Outcome("value", (verdict, row[1], _canon(row[2]), row[3])), None

        return call(conn, go)

    shown = (
        "SQL NULL"
        if variant == "sql_null"
        else f"{_size(result)} bytes"
        if _size(result) > 1000
        else json.dumps(result)
    )
    return Op("settle", f"settle claim {claim_id[:8]} {outcome} {shown} ({variant})", real,
              lambda m, ids, now: m.settle(claim_id, outcome, result, _size(result), variant == "sql_null", now),
              run)  # fmt: skip


def reconcile(run: str, max_actions: int | None) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            row = conn.execute(
                "select generation, actions, processed, health, run_status from engine.v2_reconcile(%s, %s)",
                (run, max_actions),
            ).fetchone()
            assert row is not None
            return Outcome("value", tuple(row)), None

        return call(conn, go)

    return Op("reconcile", f"reconcile {run[:8]} max_actions {max_actions}", real,
              lambda m, ids, now: m.reconcile(run, max_actions, now), run)  # fmt: skip


def reconcile_next(max_actions: int | None, skip: tuple[str, ...] = ()) -> Op:
    """v2_reconcile_next: the engine picks the run (its id is part of the answer)."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            row = conn.execute(
                "select run_id::text, generation, actions, processed, health, run_status "
                "from engine.v2_reconcile_next(%s, %s::uuid[])",
                (max_actions, list(skip)),
            ).fetchone()
            return (Outcome("value", tuple(row)) if row else Outcome("empty")), None

        return call(conn, go)

    return Op("reconcile_next", f"reconcile_next max_actions {max_actions} skip {[s[:8] for s in skip]}", real,
              lambda m, ids, now: m.reconcile_next(max_actions, now, skip))  # fmt: skip


def drop_queue(queue: str) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (Outcome("value", bool(conn.execute("select pgmq.drop_queue(%s)", (queue,))
                                                          .fetchone()[0])), None))  # type: ignore[index]  # fmt: skip

    return Op("drop_queue", f"poison: drop queue {queue}", real, lambda m, ids, now: m.drop_queue(queue))


def v1_write(run: str, step: str, kind: str) -> Op:
    sql = ("select engine.complete_task(%s, %s, 0, '{}'::jsonb)" if kind == "complete"
           else "select engine.fail_task(%s, %s, 0, 'model')")  # fmt: skip

    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (conn.execute(sql, (run, step)), (Outcome("value", "written"), None))[1])

    return Op("v1_write", f"v1 {kind}_task on v2 run {run[:8]} step {step}", real,
              lambda m, ids, now: m.v1_write(run, step), run)  # fmt: skip


def read(queue: str) -> Op:
    """pgmq.read with vt 0: exactly the live messages whose visibility time has come."""

    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute("select message from pgmq.read(%s, 0, 50)", (queue,)).fetchall()
            owners = sorted((str(r[0]["run_id"]), str(r[0]["step_slug"])) for r in rows)
            return Outcome("value", tuple(owners)), None

        return call(conn, go)

    def model(m: Model, ids: Any, now: Window) -> Outcome:
        return m.read(queue, now)

    return Op("read", f"read {queue}", real, model)
