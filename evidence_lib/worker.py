"""The v1 worker: read its queue -> claim with `start_tasks` -> run handlers -> report.

Handlers run in a bounded thread pool. Results are reported exactly as returned (falsy values
included). A handler exception becomes `fail_task`; a broken connection while reporting is a
`TransportError`: the same report is retried on a new connection and never turns into a task
failure. Messages that are not ours are left intact with a warning naming queue and id.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from evidence_lib import engine
from evidence_lib.flows import AnyFlow, StepDef
from evidence_lib.jsontypes import Json
from evidence_lib.messages import UnsupportedMessage, parse_task_message
from evidence_lib.worker_common import (
    HandlerError,
    ReportRejected,
    SafeLog,
    ShutdownRequested,
    TransportError,
    WorkerConfig,
    ensure_json,
    resolve_queue,
)


@dataclass
class WorkerStats:
    read: int = 0
    granted: int = 0
    completed: int = 0
    failed: int = 0
    left_intact: int = 0
    transport_errors: int = 0
    reports_rejected: int = 0
    abandoned: int = 0
    errors: list[str] = field(default_factory=list)


class Worker:
    """A v1 worker for one plain flow, or for one step of a step-queued flow."""

    def __init__(
        self,
        url: str,
        flow: AnyFlow,
        step: str | None = None,
        *,
        config: WorkerConfig | None = None,
        logger: logging.Logger | None = None,
        name: str = "worker",
    ) -> None:
        self.queue, self.step = resolve_queue(flow, step)  # before any database work
        self.flow = flow
        self.url = url
        self.config = config or WorkerConfig()
        self.name = name
        self.log = SafeLog(logger or logging.getLogger(f"evidence_lib.worker.{flow.slug}"))
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._closing = False
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.config.concurrency)
        self._pool: ConnectionPool[Any] | None = None
        self._executor: ThreadPoolExecutor | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> Worker:
        self._pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=self.config.concurrency + 1,
            open=True,
            kwargs={"autocommit": True, "application_name": self.name},
        )
        self._executor = ThreadPoolExecutor(self.config.concurrency, thread_name_prefix=self.name)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop: wait up to the grace for running handlers, then release connections."""
        self._stop.set()
        if self._executor is not None:
            self._drain(self.config.shutdown_grace)
            self._closing = True
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def request_shutdown(self) -> None:
        """Stop reading; running handlers may finish within the shutdown grace."""
        self._stop.set()

    # -- the loop ----------------------------------------------------------------------------

    def run(self, *, handle_signals: bool = True) -> WorkerStats:
        """Poll until shutdown (SIGINT/SIGTERM when `handle_signals` in the main thread)."""
        with self._signals(handle_signals):
            while not self._stop.is_set():
                if self.poll() == 0:
                    self._stop.wait(self.config.poll_interval)
        self.close()
        return self.stats

    def poll(self, *, wait_for_handlers: bool = False) -> int:
        """One cycle: read up to the free capacity, claim, start handlers.

        Returns the number of messages read (0: the queue had nothing visible for us).
        """
        assert self._pool is not None and self._executor is not None, "use `with Worker(...)`"
        free = self._free_slots()
        if free == 0 or self._stop.is_set():
            return 0
        futures: list[Future[None]] = []
        try:
            with self._pool.connection() as conn:
                messages = engine.read_messages(conn, self.queue, self.config.visibility_timeout, free)
                ids = self._ours(messages)
                grants = engine.start_tasks(conn, self.queue, ids) if ids else []
        except psycopg.OperationalError as exc:
            self._error(TransportError(f"reading {self.queue}: {exc}"))
            return 0
        self.stats.read += len(messages)
        self.stats.granted += len(grants)
        won = {g.message_id for g in grants}
        for mid in ids:
            if mid not in won:
                self.stats.left_intact += 1
                self.log(
                    logging.WARNING,
                    "not_granted",
                    f"message {mid} in queue {self.queue} was not granted (unknown run, "
                    "task not queued, or taken by another worker); left intact",
                    queue=self.queue,
                    message_id=mid,
                )
        for grant in grants:
            self._slots.acquire()
            futures.append(self._executor.submit(self._execute, grant))
        if wait_for_handlers:
            wait(futures)
        return len(messages)

    def _free_slots(self) -> int:
        taken = 0
        while taken < self.config.concurrency and self._slots.acquire(blocking=False):
            taken += 1
        for _ in range(taken):
            self._slots.release()
        return taken

    def _drain(self, timeout: float) -> None:
        acquired = 0
        deadline = threading.Event()
        timer = threading.Timer(timeout, deadline.set)
        timer.start()
        try:
            while acquired < self.config.concurrency and not deadline.is_set():
                if self._slots.acquire(timeout=0.05):
                    acquired += 1
        finally:
            timer.cancel()
            for _ in range(acquired):
                self._slots.release()

    def _ours(self, messages: list[engine.QueueMessage]) -> list[int]:
        ids: list[int] = []
        for m in messages:
            try:
                task = parse_task_message(m.message)
                if task.protocol != "v1":
                    raise UnsupportedMessage(f"protocol {task.protocol} is not served by a v1 worker")
                if self.step is not None and task.step_slug != self.step:
                    raise UnsupportedMessage(
                        f"message is for step {task.step_slug}, this worker serves {self.step}"
                    )
            except UnsupportedMessage as exc:
                self.stats.left_intact += 1
                self.log(
                    logging.WARNING,
                    "unsupported_message",
                    f"message {m.msg_id} in queue {self.queue} left intact: {exc}",
                    queue=self.queue,
                    message_id=m.msg_id,
                )
                continue
            ids.append(m.msg_id)
        return ids

    # -- one task ----------------------------------------------------------------------------

    def _execute(self, grant: engine.TaskGrant) -> None:
        try:
            step = self._step_def(grant.step_slug)
            try:
                result: Json = ensure_json(step.handler(grant.input))
            except HandlerError as exc:
                self._report(grant, error=str(exc))
            except Exception as exc:
                self._report(grant, error=f"{type(exc).__name__}: {exc}")
            else:
                self._report(grant, output=result)
        finally:
            self._slots.release()

    def _step_def(self, slug: str) -> StepDef:
        return self.flow.step_def(slug)

    def _report(self, grant: engine.TaskGrant, *, output: Json = None, error: str | None = None) -> None:
        """Report once per attempt; transport errors retry the same report on a new connection."""
        what = "failure" if error is not None else "result"
        for attempt in range(1, self.config.report_attempts + 1):
            if self._closing:
                self.stats.abandoned += 1
                self._error(
                    ShutdownRequested(
                        f"task {grant.run_id}/{grant.step_slug} finished after the shutdown grace; "
                        "not reported, left to stalled-task recovery"
                    )
                )
                return
            pool = self._pool
            assert pool is not None
            try:
                with pool.connection() as conn:
                    if error is not None:
                        engine.fail_task(conn, grant.run_id, grant.step_slug, grant.task_index, error)
                        self.stats.failed += 1
                    else:
                        engine.complete_task(conn, grant.run_id, grant.step_slug, grant.task_index, output)
                        self.stats.completed += 1
                return
            except psycopg.OperationalError as exc:
                self.stats.transport_errors += 1
                self._error(
                    TransportError(
                        f"reporting the {what} of {grant.run_id}/{grant.step_slug} (attempt {attempt}): {exc}"
                    )
                )
            except psycopg.Error as exc:
                self.stats.reports_rejected += 1
                self._error(
                    ReportRejected(
                        f"the {what} of {grant.run_id}/{grant.step_slug} was refused: [{exc.sqlstate}] {exc}"
                    )
                )
                return
        self.log(
            logging.ERROR,
            "report_gave_up",
            f"gave up reporting the {what} of {grant.run_id}/{grant.step_slug} after "
            f"{self.config.report_attempts} transport errors; the task stays started and "
            "requeue_stalled_tasks will recover it",
            run_id=str(grant.run_id),
        )

    def _error(self, exc: Exception) -> None:
        with self._lock:
            self.stats.errors.append(f"{type(exc).__name__}: {exc}")
        self.log(logging.ERROR, type(exc).__name__, str(exc))

    @contextmanager
    def _signals(self, enabled: bool) -> Iterator[None]:
        if not enabled or threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        for s in previous:
            signal.signal(s, lambda *_: self.request_shutdown())
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
