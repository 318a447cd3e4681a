"""The v2 worker bridge and the real faults: lost acknowledgement, killed sessions, deadlines,
shutdown, unknown messages, and the reconciler driver around a poisoned run."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest
from psycopg import conninfo

from evidence_lib.engine import v2
from evidence_lib.engine.flows import Flow, compile_flow, with_step_queues
from evidence_lib.engine.jsontypes import Json
from evidence_lib.harness.faults import LostAckProxy, drop_route_queue, held_hook, kill_at_hook, xact_status
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.harness.waits import wait_for_lease_expiry
from evidence_lib.pg.db import Conn, connect
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.v2 import V2Worker
from tests.helpers import queue_messages, scalar


def counting_flow(db_url: str, slug: str = "eff", *, timeout: int = 30, a: Any = None, mode: str = "flow") -> Any:
    """A -> B whose handlers count their executions in a side-effect table."""

    def effect(step: str, value: Json) -> Json:
        with connect(db_url) as c:
            c.execute("insert into test_effects (step) values (%s)", (step,))
        return value

    flow: Flow[Any] = Flow(slug, max_attempts=1, timeout=timeout)
    flow.add("A", a or (lambda x: effect("A", {"a": x})))
    flow.add("B", lambda x: effect("B", "b-result"), deps=["A"])
    return with_step_queues(flow) if mode == "step" else flow


@pytest.fixture
def effects(conn: Conn) -> Conn:
    conn.execute("create table test_effects (id serial primary key, step text not null)")
    return conn


def drive(url: str, flow: Any, *, step: str | None = None) -> None:
    """Poll one worker until nothing is visible, reconciling in between."""
    with V2Worker(url, flow, step) as w:
        for _ in range(4):
            w.poll(wait_for_handlers=True)
            Reconciler(url).drain()


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (False, "false"), ("", '""'), ([], "[]"), ({}, "{}"), (None, "null")],
    ids=str,
)
def test_falsy_results_are_settled_exactly(conn: Conn, db_url: str, value: Json, text: str) -> None:
    flow: Flow[Any] = Flow("falsy", max_attempts=1)
    flow.add("A", lambda _: value).add("B", lambda x: x["A"], deps=["A"])  # type: ignore[index, call-overload]
    compile_flow(conn, flow)
    run_id = v2.start_run(conn, "falsy", {})
    drive(db_url, flow)
    assert scalar(conn, "select output::text from engine.step_tasks where step_slug = 'A'") == text
    assert (
        scalar(
            conn,
            "select result::text from engine.task_settlements s join engine.task_claims c "
            "using (claim_id) where c.step_slug = 'A'",
        )
        == text
    )
    assert scalar(conn, "select status from engine.runs where run_id = %s", (run_id,)) == "completed"
    assert scalar(conn, "select output::text from engine.runs") == text


def test_lost_acknowledgement_is_replayed_and_the_handler_runs_once(effects: Conn, db_url: str) -> None:
    flow = counting_flow(db_url)
    compile_flow(effects, flow)
    run_id = v2.start_run(effects, "eff", {"n": 1})
    with LostAckProxy(db_url) as proxy:
        proxy.arm()
        with V2Worker(proxy.url, flow) as w:
            w.poll(wait_for_handlers=True)
        assert proxy.fired
        [record] = w.stats.settlements
    first, second = record.attempts
    assert (first.result, first.indeterminate) == ("transport_error", True)  # the client's view
    assert xact_status(effects, str(first.xid)) == "committed"  # the server's truth
    assert (second.result, second.verdict, record.final) == ("receipt", "replayed", "replayed")
    assert scalar(effects, "select count(*) from test_effects where step = 'A'") == 1
    assert scalar(effects, "select count(*) from engine.task_settlements") == 1
    before = snapshot(effects)
    conflict = v2.settle(effects, record.claim_id, "completed", {"a": "something else"})
    assert conflict.verdict == "conflict" and diff(before, snapshot(effects)) == {}
    drive(db_url, flow)
    assert scalar(effects, "select status from engine.runs where run_id = %s", (run_id,)) == "completed"
    assert scalar(effects, "select count(*) from test_effects") == 2


def _armed(url: str, *points: str) -> str:
    return conninfo.make_conninfo(url, options=f"-c engine.hooks={','.join(points)}")


def test_the_deadline_stops_retries(effects: Conn, db_url: str) -> None:
    flow = counting_flow(db_url, timeout=1)  # lease horizon: claim + 3 s
    compile_flow(effects, flow)
    v2.start_run(effects, "eff", {})
    with connect(db_url) as controller:
        key = scalar(controller, "select engine._hook_key('settle.after_run_lock')")
        controller.execute("select pg_advisory_lock(7001, %s)", (key,))  # settlement waits in SQL
        try:
            with V2Worker(_armed(db_url, "settle.after_run_lock"), flow) as w:
                w.poll(wait_for_handlers=True)
        finally:
            controller.execute("select pg_advisory_unlock(7001, %s)", (key,))
    [record] = w.stats.settlements
    assert record.final == "deadline_exceeded" and len(record.attempts) == 1
    assert record.attempts[0].result == "deadline" and "statement timeout" in str(record.attempts[0].error)
    assert record.attempts[0].seconds < 4
    assert scalar(effects, "select count(*) from engine.task_settlements") == 0
    assert scalar(effects, "select state from engine.task_claims") == "current"  # left to takeover


def test_a_transport_error_never_becomes_a_handler_failure(effects: Conn, db_url: str) -> None:
    flow = counting_flow(db_url)
    compile_flow(effects, flow)
    v2.start_run(effects, "eff", {})
    worker = V2Worker(_armed(db_url, "settle.after_run_lock"), flow, name="victim")
    with worker, connect(db_url) as controller:
        with held_hook(controller, "settle.after_run_lock") as key:  # held before the worker starts
            polling = threading.Thread(target=lambda: worker.poll(wait_for_handlers=True))
            polling.start()
            kill = kill_at_hook(controller, "victim", "settle.after_run_lock", key)
        polling.join(30)
    assert kill.proof and kill.proof[0].classid == 7001
    [record] = worker.stats.settlements
    assert [a.result for a in record.attempts] == ["transport_error", "receipt"]
    # the settlements and COMMIT travel in one message: a reply lost anywhere in it is unknown to
    # the client; the server's truth (read independently) says the killed one never committed
    assert record.attempts[0].indeterminate is True and record.attempts[0].xid
    assert xact_status(effects, str(record.attempts[0].xid)) == "aborted"
    assert (record.outcome, record.final) == ("completed", "accepted")
    assert worker.stats.handler_errors == 0
    assert scalar(effects, "select status from engine.step_tasks where step_slug = 'A'") == "completed"
    assert scalar(effects, "select count(*) from test_effects") == 1


def test_a_handler_error_fails_the_run_and_is_its_own_error_class(conn: Conn, db_url: str) -> None:
    def boom(_: Json) -> Json:
        raise ValueError("bad input")

    flow: Flow[Any] = Flow("boom", max_attempts=1)
    flow.add("A", boom).add("B", lambda x: x, deps=["A"])
    compile_flow(conn, flow)
    v2.start_run(conn, "boom", {})
    with V2Worker(db_url, flow) as w:
        w.poll(wait_for_handlers=True)
    assert w.stats.handler_errors == 1 and w.stats.transport_errors == 0
    assert any(e.startswith("HandlerError: ValueError: bad input") for e in w.stats.errors)
    assert w.stats.settlements[0].outcome == "failed"
    assert scalar(conn, "select status from engine.runs") == "failed"
    assert json.loads(scalar(conn, "select error_message from engine.step_tasks")) == {
        "error": "ValueError",
        "message": "bad input",
    }


def test_shutdown_leaves_the_claim_current(conn: Conn, db_url: str) -> None:
    release, started = threading.Event(), threading.Event()

    def slow(_: Json) -> Json:
        started.set()
        release.wait(10)
        return "late"

    flow: Flow[Any] = Flow("slow", max_attempts=1)
    flow.add("A", slow).add("B", lambda x: x, deps=["A"])
    compile_flow(conn, flow)
    v2.start_run(conn, "slow", {})
    w = V2Worker(db_url, flow, config=WorkerConfig(concurrency=1, shutdown_grace=0.2, visibility_timeout=5))
    with w:
        w.poll()
        assert started.wait(10)
        w.request_shutdown()
    release.set()  # the handler finishes after the grace: it must not settle
    deadline = time.monotonic() + 10
    while w.stats.abandoned == 0 and time.monotonic() < deadline:
        time.sleep(0.01)  # waits for the late handler thread to give up (liveness bound)
    assert w.stats.abandoned == 1 and any(e.startswith("ShutdownRequested") for e in w.stats.errors)
    assert scalar(conn, "select state from engine.task_claims") == "current"
    assert scalar(conn, "select count(*) from engine.task_settlements") == 0
    assert w.stats.handler_errors == 0


def test_takeover_after_a_worker_dies(effects: Conn, db_url: str) -> None:
    stuck = threading.Event()
    flow = counting_flow(db_url, timeout=1, a=lambda x: stuck.wait(30) and {"never": True})
    compile_flow(effects, flow)
    run_id = v2.start_run(effects, "eff", {})
    dead = V2Worker(db_url, flow, name="dying", config=WorkerConfig(shutdown_grace=0, visibility_timeout=5))
    with dead:
        dead.poll()
        effects.execute(
            "select pg_terminate_backend(pid, 5000) from pg_stat_activity where application_name = 'dying'"
        )  # the worker's sessions die
    [claim_id] = [r[0] for r in effects.execute("select claim_id from engine.task_claims").fetchall()]
    wait_for_lease_expiry(effects, claim_id)
    msg = scalar(effects, "select message_id from engine.step_tasks where step_slug = 'A'")
    grant = v2.take_over(effects, run_id, "A", claim_id, "eff", msg)
    assert grant is not None
    assert v2.settle(effects, grant.claim_id, "completed", {"a": "recovered"}).verdict == "accepted"
    stuck.set()
    assert v2.settle(effects, claim_id, "completed", {"a": "late"}).verdict == "stale"
    assert scalar(effects, "select infrastructure_losses from engine.step_tasks where step_slug = 'A'") == 1


def test_unknown_messages_stay_intact(conn: Conn, db_url: str, caplog: Any) -> None:
    flow = counting_flow(db_url, "intact", mode="step")
    compile_flow(conn, flow)
    junk = [
        '"text"',
        '{"protocol": "v1", "run_id": "6f1c4c1e-0000-4000-8000-000000000000", "step_slug": "A", "task_index": 0}',
        '{"protocol": "v2", "run_id": "6f1c4c1e-0000-4000-8000-000000000000", "step_slug": "B", "task_index": 0}',
        '{"protocol": "v2", "run_id": "6f1c4c1e-0000-4000-8000-000000000000", "step_slug": "A", "task_index": 0}',
    ]
    ids = [scalar(conn, "select pgmq.send('intact__a', %s::jsonb)", (j,)) for j in junk]
    before = {m["msg_id"]: m["message"] for m in queue_messages(conn, "intact__a")}
    with caplog.at_level(logging.INFO), V2Worker(db_url, flow, "A") as w:
        while w.poll(wait_for_handlers=True):
            pass
    after = {m["msg_id"]: m["message"] for m in queue_messages(conn, "intact__a")}
    assert after == before and set(after) == set(ids)
    assert scalar(conn, "select count(*) from pgmq.a_intact__a") == 0
    for mid in ids:
        assert any(f"message {mid} in queue intact__a" in r.getMessage() for r in caplog.records)


def test_the_reconciler_driver_keeps_other_runs_moving_around_a_poisoned_run(conn: Conn, db_url: str) -> None:
    poisoned_flow = counting_flow(db_url, "poison", mode="step")
    healthy_flow = counting_flow(db_url, "healthy", mode="step")
    conn.execute("create table test_effects (id serial primary key, step text not null)")
    compile_flow(conn, poisoned_flow)
    compile_flow(conn, healthy_flow)
    poisoned = v2.start_run(conn, "poison", {})
    healthy = [v2.start_run(conn, "healthy", {"i": i}) for i in range(5)]
    drop_route_queue(conn, "poison__b")  # behind the engine's back
    reconciler = Reconciler(db_url, poll_interval=0.02)
    thread = threading.Thread(target=reconciler.run)
    thread.start()
    try:
        with V2Worker(db_url, poisoned_flow, "A") as wp:
            wp.poll(wait_for_handlers=True)
        with V2Worker(db_url, healthy_flow, "A") as wa, V2Worker(db_url, healthy_flow, "B") as wb:
            for _ in range(50):
                wa.poll(wait_for_handlers=True)
                wb.poll(wait_for_handlers=True)
                done = scalar(
                    conn,
                    "select count(*) from engine.runs where flow_slug = 'healthy' and status = 'completed'",
                )
                health = v2.work_row(conn, poisoned)["health"]
                if done == len(healthy) and health == "attention":
                    break
                threading.Event().wait(0.1)  # progress poll; the backoff itself is real time
    finally:
        reconciler.stop()
        thread.join(10)
    assert scalar(conn, "select count(*) from engine.runs where flow_slug = 'healthy' and status = 'completed'") == 5
    work = v2.work_row(conn, poisoned)
    assert work["health"] == "attention" and work["consecutive_errors"] == 3
    assert scalar(conn, "select count(*) from engine.engine_errors where run_id = %s", (poisoned,)) == 3


def test_a_failing_log_sink_never_changes_a_settlement(conn: Conn, db_url: str) -> None:
    class Exploding(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise OSError("log sink down")

    logger = logging.getLogger("test.v2.exploding")
    logger.setLevel(logging.INFO)
    logger.addFilter(Exploding())
    flow: Flow[Any] = Flow("logsink", max_attempts=1)
    flow.add("A", lambda _: 7).add("B", lambda x: x, deps=["A"])
    compile_flow(conn, flow)
    v2.start_run(conn, "logsink", {})
    with V2Worker(db_url, flow, logger=logger) as w:
        w.poll(wait_for_handlers=True)
    assert w.log.failures >= 1 and w.stats.settlements[0].final == "accepted"
    assert scalar(conn, "select output from engine.step_tasks where step_slug = 'A'") == 7
