"""The v1 worker: read its queue -> claim with `start_tasks` -> run handlers -> report.

Handlers run in a bounded thread pool. Results are reported exactly as returned (falsy values
included). A handler exception becomes `fail_task`; a broken connection while reporting is a
`TransportError`: the same report is retried on a new connection and never turns into a task
failure. Messages that are not ours are left intact with a warning naming queue and id.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, wait
from dataclasses import dataclass, field
from functools import partial

import psycopg

from evidence_lib.engine import v1
from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.messages import UnsupportedMessage, parse_task_message
from evidence_lib.workers.base import WorkerBase
from evidence_lib.workers.config import (
    HandlerError,
    ReportRejected,
    ShutdownRequested,
    TransportError,
    ensure_json,
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


class Worker(WorkerBase):
    """A v1 worker for one plain flow, or for one step of a step-queued flow."""

    default_name = "worker"

    stats: WorkerStats

    def setup(self) -> None:
        self.stats = WorkerStats()

    def __enter__(self) -> Worker:
        super().__enter__()
        return self

    def poll(self, *, wait_for_handlers: bool = False) -> int:
        """One cycle: read up to the free capacity, claim, start handlers.

        Returns the number of messages read (0: the queue had nothing visible for us).
        """
        free = self.free_slots()
        if free == 0 or self.stopping:
            return 0
        try:
            with self.pool.connection(self.config.pool_wait) as conn:
                with self.timed("pgmq.read"):
                    messages = v1.read_messages(conn, self.queue, self.config.visibility_timeout, free)
                ids = self._ours(messages)
                with self.timed("start_tasks"):
                    grants = v1.start_tasks(conn, self.queue, ids) if ids else []
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
        futures: list[Future[None]] = [self.submit(partial(self._execute, g)) for g in grants]
        if wait_for_handlers:
            wait(futures)
        return len(messages)

    def _ours(self, messages: list[v1.QueueMessage]) -> list[int]:
        ids: list[int] = []
        for m in messages:
            try:
                task = parse_task_message(m.message)
                if task.protocol != "v1":
                    raise UnsupportedMessage(f"protocol {task.protocol} is not served by a v1 worker")
                if self.step is not None and task.step_slug != self.step:
                    raise UnsupportedMessage(f"message is for step {task.step_slug}, this worker serves {self.step}")
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

    def _execute(self, grant: v1.TaskGrant) -> None:
        step = self.flow.step_def(grant.step_slug)
        try:
            result: Json = ensure_json(step.handler(grant.input))
        except HandlerError as exc:
            self._report(grant, error=str(exc))
        except Exception as exc:
            self._report(grant, error=f"{type(exc).__name__}: {exc}")
        else:
            self._report(grant, output=result)

    def _report(self, grant: v1.TaskGrant, *, output: Json = None, error: str | None = None) -> None:
        """Report once per attempt; transport errors retry the same report on a new connection."""
        what = "failure" if error is not None else "result"
        for attempt in range(1, self.config.report_attempts + 1):
            if self.closing:
                self.stats.abandoned += 1
                self._error(
                    ShutdownRequested(
                        f"task {grant.run_id}/{grant.step_slug} finished after the shutdown grace; "
                        "not reported, left to stalled-task recovery"
                    )
                )
                return
            try:
                with self.pool.connection(self.config.pool_wait) as conn:
                    if error is not None:
                        v1.fail_task(conn, grant.run_id, grant.step_slug, grant.task_index, error)
                        self.stats.failed += 1
                    else:
                        with self.timed("complete_task"):
                            v1.complete_task(conn, grant.run_id, grant.step_slug, grant.task_index, output)
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
