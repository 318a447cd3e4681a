"""The v1 worker: exact results, failures, transport errors, logging errors, unknown messages."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from evidence_lib.engine import v1
from evidence_lib.engine.flows import Flow, FlowMismatch, compile_flow, with_step_queues
from evidence_lib.engine.jsontypes import Json
from evidence_lib.pg.db import Conn, connect
from evidence_lib.workers.config import StepSelectorError, WorkerConfig
from evidence_lib.workers.v1 import Worker
from tests.helpers import queue_messages, run, scalar, task

FALSY: list[tuple[Json, str]] = [
    (0, "0"),
    (False, "false"),
    ("", '""'),
    ([], "[]"),
    ({}, "{}"),
    (None, "null"),
]


def one_step(slug: str, handler: Any, **options: Any) -> Flow[Any]:
    flow: Flow[Any] = Flow(slug, **options)
    flow.add("a", handler)
    return flow


def drain(worker: Worker) -> None:
    while worker.poll(wait_for_handlers=True):
        pass


@pytest.mark.parametrize(("value", "text"), FALSY, ids=[t for _, t in FALSY])
def test_falsy_results_are_stored_exactly(conn: Conn, db_url: str, value: Json, text: str) -> None:
    """Defect: falsy handler results became null."""
    flow = one_step("falsy", lambda _: value)
    compile_flow(conn, flow)
    run_id = v1.start_flow(conn, "falsy", {})
    with Worker(db_url, flow) as w:
        drain(w)
    assert scalar(conn, "select output::text from engine.step_tasks") == text  # not SQL NULL
    assert run(conn, run_id)["status"] == "completed"


def test_handler_exception_is_a_task_failure_with_retry(conn: Conn, db_url: str) -> None:
    calls: list[Json] = []

    def flaky(payload: Json) -> Json:
        calls.append(payload)
        if len(calls) == 1:
            raise RuntimeError("first try fails")
        return "ok"

    flow = one_step("flaky", flaky, base_delay=0)
    compile_flow(conn, flow)
    run_id = v1.start_flow(conn, "flaky", {"k": 1})
    with Worker(db_url, flow) as w:
        drain(w)
        assert w.stats.failed == 1
    assert task(conn, run_id, "a")["attempts_count"] == 2
    assert task(conn, run_id, "a")["error_message"] == "RuntimeError: first try fails"
    assert run(conn, run_id)["output"] == {"a": "ok"}


def test_non_json_result_is_a_handler_failure(conn: Conn, db_url: str) -> None:
    flow = one_step("nonjson", lambda _: {"x": object()}, max_attempts=1)  # type: ignore[dict-item]
    compile_flow(conn, flow)
    run_id = v1.start_flow(conn, "nonjson", {})
    with Worker(db_url, flow) as w:
        drain(w)
    assert run(conn, run_id)["status"] == "failed"
    assert "not JSON" in task(conn, run_id, "a")["error_message"]


def test_transport_error_while_reporting_success_is_not_a_task_failure(conn: Conn, db_url: str) -> None:
    """Defect: a broken connection while reporting success was reported as a handler failure."""

    def kill_my_connections(_: Json) -> Json:
        with connect(db_url) as admin:  # a real transport loss: the worker's backends die
            admin.execute(
                "select pg_terminate_backend(pid, 5000) from pg_stat_activity where application_name = 'w_transport'"
            )
        return "done"

    flow = one_step("transport", kill_my_connections, max_attempts=1)
    compile_flow(conn, flow)
    run_id = v1.start_flow(conn, "transport", {})
    with Worker(db_url, flow, name="w_transport", config=WorkerConfig(concurrency=1)) as w:
        drain(w)
        stats = w.stats
    assert stats.transport_errors >= 1 and stats.failed == 0 and stats.completed == 1
    assert any(e.startswith("TransportError") for e in stats.errors)
    t = task(conn, run_id, "a")
    assert (t["status"], t["attempts_count"], t["error_message"]) == ("completed", 1, None)


def test_a_failing_log_sink_never_changes_the_outcome(conn: Conn, db_url: str) -> None:
    class Exploding(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            raise OSError("log disk full")

    logger = logging.getLogger("test.exploding")
    logger.addFilter(Exploding())
    flow = one_step("logfail", lambda _: 42)
    compile_flow(conn, flow)
    run_id = v1.start_flow(conn, "logfail", {})
    conn.execute("select pgmq.send('logfail', '\"garbage\"')")  # makes the worker log a warning
    with Worker(db_url, flow, logger=logger) as w:
        drain(w)
        assert w.log.failures >= 1
    assert run(conn, run_id)["output"] == {"a": 42}


def test_unknown_messages_are_left_intact(conn: Conn, db_url: str, caplog: Any) -> None:
    flow = one_step("intact", lambda _: 1)
    compile_flow(conn, flow)
    bodies = [
        '"not an object"',
        '{"protocol": "v9", "run_id": "x", "step_slug": "a", "task_index": 0}',
        '{"protocol": "v1", "run_id": "6f1c4c1e-0000-4000-8000-000000000000", "step_slug": "a", "task_index": 0}',
        '{"hello": "world"}',
    ]
    ids = [scalar(conn, "select pgmq.send('intact', %s::jsonb)", (b,)) for b in bodies]
    run_id = v1.start_flow(conn, "intact", {})
    before = {m["msg_id"]: m for m in queue_messages(conn, "intact")}
    with caplog.at_level(logging.WARNING), Worker(db_url, flow) as w:
        drain(w)
    assert (w.stats.read, w.stats.granted, w.stats.completed, w.stats.failed, w.stats.left_intact) == (5, 1, 1, 0, 4)
    assert any(f"message {ids[2]} in queue intact was not granted" in r.getMessage() for r in caplog.records)
    after = {m["msg_id"]: m for m in queue_messages(conn, "intact")}
    assert set(after) == set(ids)  # nothing archived or deleted
    for mid in ids:
        assert after[mid]["message"] == before[mid]["message"]
        assert after[mid]["read_ct"] == 1  # only the worker's own read touched it
        assert any(f"message {mid} in queue intact" in r.getMessage() for r in caplog.records)
    assert scalar(conn, "select count(*) from pgmq.a_intact") == 1  # the real task only
    assert run(conn, run_id)["status"] == "completed"


def test_shutdown_leaves_unfinished_work_unreported(conn: Conn, db_url: str) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow(_: Json) -> Json:
        started.set()
        release.wait(10)
        return "late"

    flow = one_step("shutdown", slow)
    compile_flow(conn, flow)
    run_id = v1.start_flow(conn, "shutdown", {})
    w = Worker(db_url, flow, config=WorkerConfig(concurrency=1, shutdown_grace=0.2))
    with w:
        w.poll()
        assert started.wait(10)
        w.request_shutdown()
    release.set()
    assert _until(lambda: w.stats.abandoned == 1), "the late handler ended without a word"
    assert task(conn, run_id, "a")["status"] == "started"  # left to stalled-task recovery
    assert w.stats.failed == 0 and w.stats.completed == 0
    assert any(e.startswith("ShutdownRequested: task") for e in w.stats.errors)


def test_a_report_that_keeps_losing_its_connection_gives_up_and_leaves_the_task_started(
    conn: Conn, db_url: str, caplog: Any
) -> None:
    def kill_my_connections(_: Json) -> Json:
        with connect(db_url) as admin:  # a real transport loss: the worker's backends die
            admin.execute(
                "select pg_terminate_backend(pid, 5000) from pg_stat_activity where application_name = 'w_gives_up'"
            )
        return "done"

    flow = one_step("givesup", kill_my_connections, max_attempts=1)
    compile_flow(conn, flow)
    run_id = v1.start_flow(conn, "givesup", {})
    config = WorkerConfig(concurrency=1, report_attempts=1)
    with caplog.at_level(logging.ERROR), Worker(db_url, flow, name="w_gives_up", config=config) as w:
        drain(w)
    assert (w.stats.transport_errors, w.stats.completed, w.stats.failed) == (1, 0, 0)
    assert any("gave up reporting the result of" in r.getMessage() and "after 1 transport errors" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    assert task(conn, run_id, "a")["status"] == "started"  # requeue_stalled_tasks will recover it


def test_a_poll_without_a_server_is_a_transport_error_not_a_crash() -> None:
    dead = "postgresql://postgres@/postgres?host=/nonexistent-socket-dir"
    with Worker(dead, one_step("dead", lambda _: 1), config=WorkerConfig(pool_wait=0.2)) as w:
        assert w.poll() == 0
    assert w.stats.read == 0
    assert [e.split(":", 1)[0] for e in w.stats.errors] == ["TransportError"]
    assert "reading dead" in w.stats.errors[0]


def _until(condition: Any, guard: float = 10.0) -> bool:
    """Whether `condition()` became true within `guard` seconds (a liveness guard only)."""
    pause = threading.Event()
    for _ in range(int(guard / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return False


def test_worker_step_selector_rules() -> None:
    flow = one_step("sel", lambda _: 1)
    with pytest.raises(StepSelectorError):
        Worker("dbname=never_contacted", flow, "a")
    stepped = with_step_queues(flow)
    with pytest.raises(StepSelectorError):
        Worker("dbname=never_contacted", stepped)
    with pytest.raises(StepSelectorError):
        Worker("dbname=never_contacted", stepped, "zz")


def test_compile_is_idempotent_and_refuses_a_different_definition(conn: Conn) -> None:
    flow = one_step("comp", lambda _: 1)
    assert compile_flow(conn, flow) is True
    assert compile_flow(conn, flow) is False
    other = one_step("comp", lambda _: 1, timeout=5)
    before = scalar(conn, "select count(*) from engine.steps")
    with pytest.raises(FlowMismatch, match="comp"):
        compile_flow(conn, other)
    bigger = one_step("comp", lambda _: 1)
    bigger.add("b", lambda _: 2, deps=["a"])
    with pytest.raises(FlowMismatch):
        compile_flow(conn, bigger)
    assert scalar(conn, "select count(*) from engine.steps") == before
