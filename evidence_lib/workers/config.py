"""What the v1 and v2 workers share: exceptions, configuration, safe logging, step selection."""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from dataclasses import dataclass
from typing import Any

from evidence_lib.engine.flows import AnyFlow, StepQueuedFlow, route
from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.queues import flow_queue_name
from evidence_lib.errors import EvidenceError


class WorkerError(EvidenceError):
    """Base of the worker's failures; each subclass says which side failed."""


class HandlerError(WorkerError):
    """The handler raised, or returned something that is not JSON: a task failure."""


class TransportError(WorkerError):
    """The connection to PostgreSQL broke while talking to it: never a task failure."""


class ReportRejected(WorkerError):
    """The server answered the report with an SQL error (the report was not applied)."""


class DeadlineExceeded(WorkerError):
    """The reporting deadline passed before a report was acknowledged."""


class ShutdownRequested(WorkerError):
    """The worker is stopping; unfinished work is left to recovery, never failed."""


class StepSelectorError(WorkerError, ValueError):
    """The step selector does not fit the flow's queue mode (checked before any database work)."""


@dataclass(frozen=True)
class WorkerConfig:
    """One step's (or one plain flow's) worker pool settings."""

    concurrency: int = 4
    visibility_timeout: int = 30  # seconds a read reserves a message before the claim
    poll_interval: float = 0.2  # seconds to wait after an empty read (liveness only)
    shutdown_grace: float = 10.0  # seconds running handlers may take to finish on shutdown
    report_attempts: int = 3
    connect_timeout: int = 2  # seconds one connect may take (libpq's minimum is 2)
    reconnect_initial: float = 0.05  # seconds before the first reconnect after a failed one
    reconnect_cap: float = 1.0  # the longest wait between two reconnects (doubling, with jitter)
    pool_wait: float = 2.0  # seconds a poll waits for a connection (a settlement waits its lease's time left)
    wakeups: bool = True  # idle: wait for the engine's notification (LISTEN) instead of polling (v2 only)
    idle_wait: float = 10.0  # idle with wake-ups: the fallback poll for a notification lost to a reconnect
    # v2: an engine_operator login for the worker's own reconciler, which reconciles the runs this
    # worker settles right after each settlement group commits (workers/followup.py); empty: the
    # runs wait for a standalone reconciler to find them
    reconcile_url: str = ""

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.visibility_timeout < 1 or self.report_attempts < 1:
            raise ValueError(f"worker config out of range: {self}")
        if self.connect_timeout < 2 or self.reconnect_initial <= 0 or self.reconnect_cap < self.reconnect_initial:
            raise ValueError(f"worker reconnect settings out of range: {self}")


def resolve_queue(flow: AnyFlow, step: str | None) -> tuple[str, str | None]:
    """The queue a worker reads and the step it serves (None: every step of a plain flow).

    A plain flow's worker takes no step; a step-queued flow's worker takes exactly one of the
    flow's steps.
    """
    if isinstance(flow, StepQueuedFlow):
        if step is None:
            raise StepSelectorError(
                f"flow {flow.slug} uses private step queues: name one of its steps {flow.step_slugs}"
            )
        if step not in flow.step_slugs:
            raise StepSelectorError(f"flow {flow.slug} has no step {step!r}; its steps are {flow.step_slugs}")
        return route(flow, step), step
    if step is not None:
        raise StepSelectorError(
            f"flow {flow.slug} is a plain flow: its worker reads queue "
            f"{flow_queue_name(flow.slug)} for every step and takes no step selector"
        )
    return flow_queue_name(flow.slug), None


def ensure_json(value: Json) -> Json:
    """The handler result unchanged, or HandlerError when it cannot be stored as JSON."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise HandlerError(f"handler result is not JSON: {exc}") from exc
    return value


class SafeLog:
    """A logger wrapper whose failures are counted and never reach the task's outcome."""

    def __init__(self, logger: logging.Logger) -> None:
        self.logger = logger
        self.failures = 0

    def enabled(self, level: int) -> bool:
        try:
            return self.logger.isEnabledFor(level)
        except Exception:
            return True

    def __call__(self, level: int, event: str, message: str, **fields: Any) -> None:
        try:
            self.logger.log(level, message, extra={"event": event, **fields})
        except Exception as exc:  # a failing log sink must never change a task's outcome
            self.failures += 1
            with contextlib.suppress(Exception):
                sys.stderr.write(f"[logging failed: {exc!r}] {event}: {message}\n")
