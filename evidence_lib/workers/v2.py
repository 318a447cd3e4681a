"""The v2 worker: read one message (the reservation) -> claim it with `v2_claim` for its one
task -> run the handler only for a grant -> settle with a deadline.

Settlement (CONTRACT section 3): at most `worker_settlement_attempts` attempts, all before the
claim's lease horizon (an absolute deadline); each attempt runs in its own transaction whose
`statement_timeout` is the time left by the server's clock, so a wait inside SQL counts. The
attempt captures `pg_current_xact_id()` first, so a commit whose reply was lost can be judged
later with `pg_xact_status`. On a transport error the worker reconnects and resubmits the same
settlement (same claim, outcome and result); it never runs the handler again. `replayed`
counts as success; `conflict`, `stale` and `terminal` are reported as what they are.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Literal
from uuid import UUID

import psycopg
from psycopg import sql

from evidence_lib.engine import v1, v2
from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.limits import read_limits
from evidence_lib.engine.messages import UnsupportedMessage, parse_task_message
from evidence_lib.pg.db import Conn
from evidence_lib.workers.base import WorkerBase
from evidence_lib.workers.config import (
    DeadlineExceeded,
    HandlerError,
    ReportRejected,
    ShutdownRequested,
    TransportError,
    WorkerConfig,
    ensure_json,
)

AttemptResult = Literal["receipt", "transport_error", "deadline", "rejected"]


@dataclass
class AttemptRecord:
    """One settlement attempt as the client saw it."""

    attempt: int
    result: AttemptResult
    xid: str | None = None
    verdict: str | None = None
    error: str | None = None
    indeterminate: bool = False  # the commit was sent and its reply never came
    seconds: float = 0.0


@dataclass
class SettlementRecord:
    claim_id: UUID
    run_id: UUID
    step_slug: str
    outcome: v2.Outcome
    result: Json
    lease_expires_at: dt.datetime
    attempts: list[AttemptRecord] = field(default_factory=list)
    final: str = ""  # a verdict, or deadline_exceeded / rejected / gave_up / shutdown


@dataclass
class V2WorkerStats:
    read: int = 0
    granted: int = 0
    not_granted: int = 0
    left_intact: int = 0
    handler_errors: int = 0
    transport_errors: int = 0
    abandoned: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    settlements: list[SettlementRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


# One message, one round trip: BEGIN, the transaction id and statement_timeout = the time left
# by the server's clock, and the settlement. COMMIT goes alone afterwards, so the client knows
# the xid before the commit can be lost. Values are quoted client-side (psycopg.sql.Literal).
ATTEMPT = sql.SQL("""begin;
select pg_current_xact_id()::text,
       set_config('statement_timeout',
                  greatest(1, floor(extract(epoch from {lease}::timestamptz - clock_timestamp())
                                    * 1000))::bigint::text,
                  true),
       extract(epoch from {lease}::timestamptz - clock_timestamp())::float8;
select * from engine.v2_settle({claim}::uuid, {outcome}, {result}::jsonb)""")


def _attempt_sql(grant: v2.Grant, outcome: v2.Outcome, result: Json) -> sql.Composed:
    return ATTEMPT.format(
        lease=sql.Literal(grant.lease_expires_at.isoformat()),
        claim=sql.Literal(str(grant.claim_id)),
        outcome=sql.Literal(outcome),
        result=sql.Literal(json.dumps(result, allow_nan=False)),
    )


class V2Worker(WorkerBase):
    """A Dirty Runs v2 worker for one plain flow, or for one step of a step-queued flow."""

    default_name = "v2_worker"

    @classmethod
    def default_config(cls) -> WorkerConfig:
        return WorkerConfig(visibility_timeout=5)

    stats: V2WorkerStats

    def setup(self) -> None:
        self.stats = V2WorkerStats()
        self.settlement_attempts = self.config.report_attempts

    def __enter__(self) -> V2Worker:
        super().__enter__()
        try:
            with self.pool.connection() as conn:
                self.settlement_attempts = read_limits(conn).worker_settlement_attempts
        except psycopg.errors.InsufficientPrivilege:
            self.log(
                logging.INFO,
                "limits_unreadable",
                f"v2_limits() is not executable by this role; using {self.settlement_attempts} "
                "settlement attempts from the worker config",
            )
        return self

    # -- reading and claiming ----------------------------------------------------------------

    def poll(self, *, wait_for_handlers: bool = False) -> int:
        """Read and claim one message per free slot; start a handler for each grant.

        Returns the number of messages read (0: nothing visible for us).
        """
        free = self.free_slots()
        if free == 0 or self.stopping:
            return 0
        futures: list[Future[None]] = []
        read = 0
        with self.pool.connection() as conn:
            for _ in range(free):
                with self.timed("pgmq.read"):
                    messages = v1.read_messages(conn, self.queue, self.config.visibility_timeout, 1)
                if not messages:
                    break
                read += 1
                grant = self._claim(conn, messages[0])
                if grant is not None:
                    futures.append(self.submit(partial(self._execute, grant)))
        self.stats.read += read
        if wait_for_handlers:
            wait(futures)
        return read

    def _claim(self, conn: Conn, message: v1.QueueMessage) -> v2.Grant | None:
        mid = message.msg_id
        try:
            task = parse_task_message(message.message)
            if task.protocol != "v2":
                raise UnsupportedMessage(f"protocol {task.protocol} is not served by a v2 worker")
            if self.step is not None and task.step_slug != self.step:
                raise UnsupportedMessage(f"message is for step {task.step_slug}, this worker serves {self.step}")
            if task.step_slug not in self.flow.step_slugs:
                raise UnsupportedMessage(f"flow {self.flow.slug} has no step {task.step_slug}")
        except UnsupportedMessage as exc:
            self.stats.left_intact += 1
            self.log(
                logging.WARNING,
                "unsupported_message",
                f"message {mid} in queue {self.queue} left intact: {exc}",
                queue=self.queue,
                message_id=mid,
            )
            return None
        try:
            with self.timed("v2_claim"):
                grant = v2.claim(conn, task.run_id, task.step_slug, self.queue, mid)
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            self.stats.left_intact += 1
            self.log(
                logging.WARNING,
                "claim_refused",
                f"message {mid} in queue {self.queue} left intact: claim refused "
                f"[{exc.sqlstate}] {exc.diag.message_primary}",
                queue=self.queue,
                message_id=mid,
            )
            return None
        if grant is None:
            self.stats.not_granted += 1
            self.log(
                logging.INFO,
                "not_granted",
                f"message {mid} in queue {self.queue}: task not claimable now (another claim "
                "won, or the run is dirty, backing off or in attention); left intact",
                queue=self.queue,
                message_id=mid,
            )
            return None
        self.stats.granted += 1
        return grant

    # -- handler and settlement ---------------------------------------------------------------

    def _execute(self, grant: v2.Grant) -> None:
        step = self.flow.step_def(grant.step_slug)
        outcome: v2.Outcome = "completed"
        try:
            result: Json = self.encode_result(step.handler(grant.input))
        except Exception as exc:
            self.stats.handler_errors += 1
            error = exc if isinstance(exc, HandlerError) else HandlerError(f"{type(exc).__name__}: {exc}")
            self._error(error)
            outcome, result = "failed", {"error": type(exc).__name__, "message": str(exc)}
        if self.closing:
            self.stats.abandoned += 1
            self._error(
                ShutdownRequested(
                    f"claim {grant.claim_id} ({grant.run_id}/{grant.step_slug}) finished after the "
                    "shutdown grace; not settled, its claim stays current and is left to takeover"
                )
            )
            return
        self.settle(grant, outcome, result)

    # -- seams: documented points where the negative controls put a realistic worker defect ---

    def encode_result(self, value: Json) -> Json:
        """The handler's value as it is settled: exactly as returned (`None` is JSON null;
        0, false, "", [] and {} stay what they are)."""
        return ensure_json(value)

    def resubmission(self, outcome: v2.Outcome, result: Json) -> tuple[v2.Outcome, Json]:
        """What is resubmitted after a transport error: the same settlement. A transport error
        is never a handler failure."""
        return outcome, result

    def settle(self, grant: v2.Grant, outcome: v2.Outcome, result: Json) -> SettlementRecord:
        """Settle `grant` within its lease horizon; transport errors resubmit the same settlement."""
        record = SettlementRecord(
            grant.claim_id, grant.run_id, grant.step_slug, outcome, result, grant.lease_expires_at
        )
        with self._lock:
            self.stats.settlements.append(record)
        for attempt in range(1, self.settlement_attempts + 1):
            if self.closing:
                record.final = "shutdown"
                self._error(ShutdownRequested(f"settling claim {grant.claim_id} stopped by shutdown"))
                break
            if dt.datetime.now(dt.UTC) >= grant.lease_expires_at:
                record.final = "deadline_exceeded"
                self._error(
                    DeadlineExceeded(
                        f"claim {grant.claim_id}: lease horizon {grant.lease_expires_at} passed before "
                        f"settlement attempt {attempt}; left to takeover"
                    )
                )
                break
            record.attempts.append(self._attempt(attempt, grant, outcome, result))
            last = record.attempts[-1]
            if last.result == "transport_error":
                outcome, result = self.resubmission(outcome, result)
            if last.result == "receipt":
                record.final = str(last.verdict)
                break
            if last.result in ("deadline", "rejected"):
                record.final = "deadline_exceeded" if last.result == "deadline" else "rejected"
                break
        else:
            record.final = "gave_up"
            self.log(
                logging.ERROR,
                "settlement_gave_up",
                f"claim {grant.claim_id}: {self.settlement_attempts} settlement attempts failed "
                "in transport; the claim stays current and is left to takeover",
            )
        with self._lock:
            self.stats.verdicts[record.final] += 1
        return record

    def _attempt(self, attempt: int, grant: v2.Grant, outcome: v2.Outcome, result: Json) -> AttemptRecord:
        started = time.perf_counter()
        rec = AttemptRecord(attempt, "receipt")
        stage = "connect"
        try:
            # the first attempt uses the pool; after a transport error the worker reconnects
            with self._settle_connection(fresh=attempt > 1) as conn:
                stage = "open"
                try:
                    with self.timed("settle.open+v2_settle"):
                        cur = conn.execute(_attempt_sql(grant, outcome, result))
                        cur.nextset()  # past BEGIN
                        row = cur.fetchone()
                        cur.nextset()
                        settle_row = cur.fetchone()
                    assert row is not None and settle_row is not None
                    rec.xid = str(row[0])
                    if float(row[2]) <= 0:
                        raise DeadlineExceeded(f"claim {grant.claim_id}: no time left by the server clock")
                    stage = "settle"
                    receipt = v2.Receipt(*settle_row)
                    rec.verdict = receipt.verdict
                except BaseException:
                    if not conn.closed and not conn.broken:
                        conn.execute("rollback")
                    raise
                stage = "commit"
                with self.timed("settle.commit"):
                    conn.execute("commit")
            if self.log.enabled(logging.INFO):  # the hot path builds no message nobody reads
                self.log(
                    logging.INFO,
                    "settled",
                    f"claim {grant.claim_id}: {receipt.verdict} (attempt {attempt}, generation {receipt.generation})",
                    claim_id=str(grant.claim_id),
                )
        except (DeadlineExceeded, psycopg.errors.QueryCanceled) as exc:
            rec.result, rec.error = "deadline", str(exc).strip()
            self._error(DeadlineExceeded(f"claim {grant.claim_id} attempt {attempt}: {rec.error}"))
        except psycopg.OperationalError as exc:
            rec.result, rec.error = "transport_error", str(exc).strip()
            rec.indeterminate = stage == "commit"
            self.stats.transport_errors += 1
            view = "indeterminate (the commit was sent, its reply lost)" if rec.indeterminate else "not committed"
            self._error(
                TransportError(
                    f"claim {grant.claim_id} attempt {attempt} at {stage}: {rec.error}; "
                    f"client view: {view}; xid {rec.xid}"
                )
            )
        except psycopg.Error as exc:
            rec.result, rec.error = "rejected", f"[{exc.sqlstate}] {exc.diag.message_primary}"
            self._error(ReportRejected(f"claim {grant.claim_id} attempt {attempt}: {rec.error}"))
        rec.seconds = time.perf_counter() - started
        return rec

    @contextmanager
    def _settle_connection(self, *, fresh: bool) -> Iterator[Conn]:
        if not fresh:
            with self.pool.connection() as conn:
                yield conn
            return
        with psycopg.connect(self.url, autocommit=True, application_name=f"{self.name}_settle") as conn:
            yield conn

    def _error(self, exc: Exception) -> None:
        with self._lock:
            self.stats.errors.append(f"{type(exc).__name__}: {exc}")
        self.log(
            logging.ERROR if not isinstance(exc, ShutdownRequested) else logging.WARNING,
            type(exc).__name__,
            str(exc),
        )
