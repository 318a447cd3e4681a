"""The machinery every worker shares (`workers/base.py`), without a server: the handler pool's
concurrency bound, the poll loop's waits, graceful shutdown with its grace, and the signals.
Every order is forced by events the test holds; a wait's timeout is only a liveness guard."""

from __future__ import annotations

import signal
import threading
from concurrent.futures import Future
from typing import Any

import psycopg
import pytest

from evidence_lib.engine.flows import Flow
from evidence_lib.workers.base import WorkerBase
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.connections import ReconnectPolicy

NOWHERE = "postgresql://nobody@/nowhere?host=/nonexistent"  # never connected: these tests send nothing
GUARD = 10.0  # seconds: a liveness guard only; a correct worker answers at once


def _flow() -> Flow[Any]:
    flow: Flow[Any] = Flow("base", max_attempts=1)
    flow.add("A", lambda x: x)
    return flow


class Scripted(WorkerBase):
    """A worker whose polls follow a script: each entry is what one poll returns (an int read, or
    an exception raised); when the script ends it asks for shutdown."""

    default_name = "scripted"

    def setup(self) -> None:
        self.script: list[int | BaseException] = []
        self.calls: list[str] = []

    def poll(self, *, wait_for_handlers: bool = False) -> int:
        self.calls.append("poll")
        if not self.script:
            self.request_shutdown()
            return 0
        step = self.script.pop(0)
        if isinstance(step, BaseException):
            raise step
        return step

    def idle_wait(self) -> None:
        self.calls.append("idle")
        super().idle_wait()

    def busy(self) -> None:
        self.calls.append("busy")


def _worker(**config: Any) -> Scripted:
    return Scripted(NOWHERE, _flow(), config=WorkerConfig(**config))


def _blocked(worker: WorkerBase) -> tuple[threading.Event, threading.Event, Future[None]]:
    """Submit a handler that says it started and then waits until released."""
    started, release = threading.Event(), threading.Event()

    def job() -> None:
        started.set()
        release.wait(GUARD)

    future = worker.submit(job)
    assert started.wait(GUARD)
    return started, release, future


def test_a_worker_is_named_by_its_caller_or_its_class() -> None:
    assert _worker().name == "scripted"
    assert Scripted(NOWHERE, _flow(), name="billing-7").name == "billing-7"
    worker = _worker()
    assert worker.poll_transport_errors == 0 and worker.outages.events == []


def test_the_pool_exists_only_while_the_worker_is_open() -> None:
    worker = _worker(connect_timeout=3, reconnect_initial=0.25, reconnect_cap=2.0)
    with pytest.raises(RuntimeError, match="worker scripted is not open"):
        worker.pool  # noqa: B018
    with worker as opened:
        assert opened is worker
        assert worker.pool.policy == ReconnectPolicy(3, 0.25, 2.0) == worker.reconnect_policy()
        assert worker.pool.size == worker.config.concurrency + 1
        assert worker.outages is worker.pool.outages  # what the worker reports is what its source saw
    with pytest.raises(RuntimeError, match="not open"):
        worker.pool  # noqa: B018
    assert worker.stopping


def test_the_handler_pool_holds_one_slot_per_running_handler() -> None:
    with _worker(concurrency=2) as worker:
        assert worker.free_slots() == 2
        _, first, done = _blocked(worker)
        assert worker.free_slots() == 1
        _, second, _ = _blocked(worker)
        assert worker.free_slots() == 0
        first.set()
        done.result(GUARD)
        assert worker.free_slots() == 1  # the slot is given back when the handler ends
        second.set()


def test_a_handler_that_raises_still_gives_its_slot_back() -> None:
    with _worker(concurrency=1) as worker:

        def fails() -> None:
            raise ValueError("the handler failed")

        future = worker.submit(fails)
        with pytest.raises(ValueError):
            future.result(GUARD)
        assert worker.free_slots() == 1


def test_close_waits_for_running_handlers_within_the_grace() -> None:
    worker = _worker(concurrency=1, shutdown_grace=GUARD)
    seen: list[bool] = []
    with worker:
        started, release = threading.Event(), threading.Event()

        def job() -> None:
            started.set()
            release.wait(GUARD)
            seen.append(worker.closing)

        worker.submit(job)
        assert started.wait(GUARD)
        closer = threading.Thread(target=worker.close)
        closer.start()
        assert _until(lambda: worker.stopping)  # close began: it stops reading first
        release.set()  # the handler ends inside the grace
        closer.join(GUARD)
        assert not closer.is_alive()
    assert seen == [False]  # it finished before the grace ran out: it may still report
    assert worker.closing


def test_a_handler_still_running_after_the_grace_sees_the_worker_closing() -> None:
    worker = _worker(concurrency=1, shutdown_grace=0.0)
    seen: list[bool] = []
    finished = threading.Event()
    with worker:
        started, release = threading.Event(), threading.Event()

        def job() -> None:
            started.set()
            release.wait(GUARD)
            seen.append(worker.closing)
            finished.set()

        worker.submit(job)
        assert started.wait(GUARD)
    release.set()  # after close returned: the grace is over
    assert finished.wait(GUARD)
    assert seen == [True]  # a late handler must not report


def test_the_loop_polls_waits_when_idle_and_stops_on_request() -> None:
    worker = _worker(poll_interval=0.01)
    worker.script = [2, 0, 1]
    with worker:
        worker.run(handle_signals=False)
    assert worker.calls == ["poll", "busy", "poll", "idle", "poll", "busy", "poll", "idle"]
    with pytest.raises(RuntimeError, match="not open"):
        worker.pool  # noqa: B018  # run() closes the worker when it stops


def test_a_poll_that_loses_its_connection_counts_and_waits() -> None:
    worker = _worker(poll_interval=0.01)
    worker.script = [psycopg.OperationalError("the server went away"), 1]
    with worker:
        worker.run(handle_signals=False)
    assert worker.poll_transport_errors == 1
    assert worker.calls == ["poll", "idle", "poll", "busy", "poll", "idle"]


def test_a_busy_loop_wakes_when_a_slot_frees_not_at_the_next_poll_interval() -> None:
    worker = _worker(concurrency=1, poll_interval=600.0)  # a loop that waited this long would hang
    started, release = threading.Event(), threading.Event()
    full: list[int] = []  # the loop's own looks that found every slot busy
    polls: list[int] = []
    looked = worker.free_slots

    def watched() -> int:  # only the loop looks at the slots: the test never takes one from it
        free = looked()
        if free == 0 and threading.current_thread().name == "loop":
            full.append(free)
        return free

    def held() -> None:
        started.set()
        release.wait(GUARD)

    def poll(*, wait_for_handlers: bool = False) -> int:
        polls.append(len(polls))
        if len(polls) == 1:
            worker.submit(held)
            return 1
        worker.request_shutdown()
        return 1

    worker.free_slots = watched  # type: ignore[method-assign]
    worker.poll = poll  # type: ignore[method-assign]
    with worker:
        loop = threading.Thread(target=worker.run, kwargs={"handle_signals": False}, name="loop", daemon=True)
        loop.start()
        assert started.wait(GUARD)
        assert _until(lambda: bool(full))  # the loop found the only slot busy: it waits for it to free
        release.set()
        loop.join(GUARD)
        assert not loop.is_alive(), "the loop slept through the freed slot"
    assert polls == [0, 1]


def test_signals_ask_for_shutdown_while_the_loop_runs_and_are_given_back() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers are set from the main thread only")
    before = signal.getsignal(signal.SIGTERM)
    worker = _worker(poll_interval=0.01)

    def poll(*, wait_for_handlers: bool = False) -> int:
        signal.raise_signal(signal.SIGTERM)  # as `kill` would: the loop must stop, not die
        return 0

    worker.poll = poll  # type: ignore[method-assign]
    with worker:
        worker.run()
    assert worker.stopping and signal.getsignal(signal.SIGTERM) == before


def test_a_worker_outside_the_main_thread_leaves_the_signals_alone() -> None:
    before = signal.getsignal(signal.SIGTERM)
    seen: list[object] = []
    worker = _worker(poll_interval=0.01)

    def poll(*, wait_for_handlers: bool = False) -> int:
        seen.append(signal.getsignal(signal.SIGTERM))
        worker.request_shutdown()
        return 0

    worker.poll = poll  # type: ignore[method-assign]
    with worker:
        loop = threading.Thread(target=worker.run, daemon=True)
        loop.start()
        loop.join(GUARD)
    assert seen == [before]


def _until(condition: Any) -> bool:
    """Whether `condition()` became true within the guard (checked as the other thread runs)."""
    done = threading.Event()
    for _ in range(int(GUARD / 0.005)):
        if condition():
            return True
        done.wait(0.005)
    return False
