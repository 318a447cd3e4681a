"""Scenario 6, admission, continued: the v1 baseline's known defects, as gates. The engine this
is modelled on shipped each of them: a claim that returned rows from a pre-update snapshot (two
sessions both received a task), a retry delay written in an unreferenced CTE (never applied),
and a failed run that left its sibling tasks queued or started.
"""

from __future__ import annotations

from typing import Any

from evidence_lib.engine import v1
from evidence_lib.engine.flows import Flow, QueueMode, compile_flow, route, with_step_queues
from evidence_lib.harness.sessions import Controller, Session
from evidence_lib.pg.db import Conn, connect, one, rows
from evidence_lib.plain import plain
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.support import consistency


def _flow(conn: Conn, slug: str, mode: QueueMode, **options: Any) -> Any:
    flow: Flow[Any] = Flow(slug, **options)
    flow.add("a", lambda x: x).add("c", lambda x: x).add("b", lambda x: x, deps=["a"])
    staged = with_step_queues(flow) if mode == "step" else flow
    compile_flow(conn, staged)
    return staged


def _message(conn: Conn, flow: Any, step: str, run_id: Any) -> int:
    msg = one(conn, "select message_id from engine.step_tasks where run_id = %s and step_slug = %s", (run_id, step))
    assert msg is not None, f"{step} has no message"
    return int(msg)


def one_winner(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    """Gate: two sessions claiming one v1 message get one winner; the loser waited on the
    winner's row lock (proven in pg_locks) and got nothing."""
    with connect(url, application_name="v1_baseline") as conn:
        flow = _flow(conn, "v1w", mode)
        run_id = v1.start_flow(conn, "v1w", {"n": 1})
        queue, msg = route(flow, "a"), _message(conn, flow, "a", run_id)
    controller = Controller(url)
    first, second = Session(url, "v1_first"), Session(url, "v1_second")
    controller.members = {first.pid, second.pid}  # only waits the race forces count (autovacuum's do not)
    try:
        first.send(lambda c: c.execute("begin")).result(timeout=10)
        won = first.send(lambda c: v1.start_tasks(c, queue, [msg])).result(timeout=10)
        pending = second.send(lambda c: v1.start_tasks(c, queue, [msg]))
        proof = controller.settle(second, pending)  # blocked on the first's row lock, or done
        first.send(lambda c: c.execute("commit")).result(timeout=10)
        lost = pending.result(timeout=10)
    finally:
        for s in (first, second):
            s.close()
        controller.close()
    blocked_by_first = bool(proof) and any(first.pid in w.blocked_by for w in proof or [])
    with connect(url) as conn:
        attempts = one(
            conn, "select attempts_count from engine.step_tasks where run_id = %s and step_slug = 'a'", (run_id,)
        )
        consistency.check(result, conn, mode, "two v1 sessions claimed one message")
    result.gate(
        "two_sessions_claiming_one_v1_message_get_one_winner",
        len(won) == 1 and lost == [] and attempts == 1 and blocked_by_first,
        f"first {len(won)} grant(s), second {len(lost)} grant(s) after waiting on the first's lock "
        f"({proof[0].describe() if proof else 'no wait observed'}); attempts_count {attempts}",
        mode,
    )


def retry_delay(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    """Gate: a v1 failure with attempts left makes the message visible only after base_delay."""
    with connect(url, application_name="v1_baseline") as conn:
        flow = _flow(conn, "v1r", mode, max_attempts=2, base_delay=3)
        run_id = v1.start_flow(conn, "v1r", {"n": 1})
        queue, msg = route(flow, "a"), _message(conn, flow, "a", run_id)
        v1.start_tasks(conn, queue, [msg])
        status = v1.fail_task(conn, run_id, "a", 0, "boom")
        delay = one(
            conn,
            f"select extract(epoch from q.vt - t.queued_at)::float8 from pgmq.q_{queue} q "
            "join engine.step_tasks t on t.message_id = q.msg_id where t.run_id = %s and t.step_slug = 'a'",
            (run_id,),
        )
        consistency.check(result, conn, mode, "a v1 failure with an attempt left")
    result.gate(
        "v1_retry_is_delayed_by_base_delay",
        status == "queued" and delay is not None and abs(delay - 3) < 0.5,
        f"task {status}; its message becomes visible {delay if delay is None else round(delay, 2)} s after the "
        "failure (base_delay 3 s)",
        mode,
    )


def siblings(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    """Gate: the last failure of one root fails the run and terminalizes its sibling's task and
    message."""
    with connect(url, application_name="v1_baseline") as conn:
        flow = _flow(conn, "v1s", mode, max_attempts=1)
        run_id = v1.start_flow(conn, "v1s", {"n": 1})
        for step in ("a", "c"):
            v1.start_tasks(conn, route(flow, step), [_message(conn, flow, step, run_id)])
        v1.fail_task(conn, run_id, "c", 0, "boom")
        found = rows(conn, "select step_slug, status from engine.step_tasks where run_id = %s", (run_id,))
        tasks = {r["step_slug"]: r["status"] for r in found}
        run_status = one(conn, "select status from engine.runs where run_id = %s", (run_id,))
        consistency.check(result, conn, mode, "a failed v1 run")
    result.gate(
        "a_failed_v1_run_terminalizes_its_siblings",
        run_status == "failed" and tasks == {"a": "cancelled", "c": "failed"},
        f"run {run_status}; tasks {plain(tasks)}",
        mode,
    )
