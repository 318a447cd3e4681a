"""The v2 worker: read up to one message per free slot in one call (the reservation) -> claim them
all in one transaction and one round trip (`engine.v2_claim_all`: each claim its own `v2_claim` call
in a subtransaction) -> run the handler only for a grant -> settle with a deadline, in a group with
every settlement that finished meanwhile (`workers/settle_groups.py`: one commit, two round trips)
-> with `reconcile_url`, its own reconciler reconciles the runs a group settled, right after
(`workers/followup.py`). Idle (after an empty read), it waits for the engine's wake-up on its queue
(LISTEN, `engine.v2_listen`) with a bounded fallback poll.

Settlement (CONTRACT section 3): at most `worker_settlement_attempts` submitted attempts, all
before the claim's lease horizon (an absolute deadline), spread over the time left with a capped
backoff; a try whose connect failed sent nothing and is not counted (docs/contract.md, "Settling
through an outage"). Each attempt runs in its own transaction whose
`statement_timeout` is the time left by the server's clock, so a wait inside SQL counts. The
attempt captures `pg_current_xact_id()` first, so a commit whose reply was lost can be judged
later with `pg_xact_status`. On a transport error the worker reconnects and resubmits the same
settlement (same claim, outcome and result); it never runs the handler again. `replayed`
counts as success; `conflict`, `stale` and `terminal` are reported as what they are.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
import time
from concurrent.futures import Future, wait
from functools import partial

import psycopg
from psycopg import sql as psql

from evidence_lib.engine import v1, v2
from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.limits import read_limits
from evidence_lib.engine.messages import UnsupportedMessage, parse_task_message
from evidence_lib.engine.v2_groups import Refused, claim_all
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
from evidence_lib.workers.connections import ConnectionUnavailable
from evidence_lib.workers.followup import FollowUp
from evidence_lib.workers.settle_groups import SettleGroups
from evidence_lib.workers.settlement import (
    RESERVE,
    RETRY_CAP,
    RETRY_INITIAL,
    AttemptRecord,
    SettlementRecord,
    V2WorkerStats,
)
from evidence_lib.workers.wakeups import Waiter


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
        self._waiter: Waiter | None = None  # waits for wake-ups when idle
        self.followup: FollowUp | None = None  # its own reconciler (config.reconcile_url)
        self.groups = SettleGroups(lambda: self.pool, self.timed, self._error, self._settled)

    def _settled(self, grants: list[v2.Grant]) -> None:
        """A settlement group committed: its accepted runs are dirty; reconcile them soon."""
        if self.followup is not None:
            self.followup.hand([g.run_id for g in grants])

    def __enter__(self) -> V2Worker:
        super().__enter__()
        if self.config.reconcile_url and self.followup is None:
            self.followup = FollowUp(self.config.reconcile_url, self.name, self.log)
        try:
            with self.pool.connection(self.config.pool_wait) as conn:
                self.settlement_attempts = read_limits(conn).worker_settlement_attempts
        except psycopg.errors.InsufficientPrivilege:
            self.log(
                logging.INFO,
                "limits_unreadable",
                f"v2_limits() is not executable by this role; using {self.settlement_attempts} "
                "settlement attempts from the worker config",
            )
        except ConnectionUnavailable:  # started while the server is away: it reconnects when polling
            self.log(
                logging.INFO,
                "limits_unreadable",
                f"the server is away at start; using {self.settlement_attempts} settlement attempts from the "
                "worker config",
            )
        return self

    # -- reading and claiming ----------------------------------------------------------------

    def poll(self, *, wait_for_handlers: bool = False) -> int:
        """Read up to one message per free slot in one call, claim them in one transaction and
        one round trip (each claim its own call in a subtransaction); start a handler for each
        grant.

        Returns the number of messages read (0: nothing visible for us).
        """
        free = self.free_slots()
        if free == 0 or self.stopping:
            return 0
        futures: list[Future[None]] = []
        with self.pool.connection(self.config.pool_wait) as conn:
            with self.timed("pgmq.read"):
                messages = v1.read_messages(conn, self.queue, self.config.visibility_timeout, free)
            deliveries = [(m, d) for m in messages if (d := self._delivery(m)) is not None]
            if deliveries:
                with self.timed("v2_claim_all"):
                    answers = claim_all(conn, [d for _, d in deliveries])
                for (message, delivery), answer in zip(deliveries, answers, strict=True):
                    grant = self._claim(conn, message, delivery, answer)
                    if grant is not None:
                        futures.append(self.submit(partial(self._execute, grant)))
        self.stats.read += len(messages)
        if wait_for_handlers:
            wait(futures)
        return len(messages)

    def _delivery(self, message: v1.QueueMessage) -> v2.Delivery | None:
        """The task a message names, or None (logged, left intact) when it is not ours to claim."""
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
        return v2.Delivery(task.run_id, task.step_slug, self.queue, mid)

    def _claim(self, conn: Conn, message: v1.QueueMessage, task: v2.Delivery,
               answer: v2.Grant | Refused | None) -> v2.Grant | None:  # fmt: skip
        mid = message.msg_id
        if isinstance(answer, Refused):
            self.stats.left_intact += 1
            self.log(
                logging.WARNING,
                "claim_refused",
                f"message {mid} in queue {self.queue} left intact: claim refused [{answer.sqlstate}] {answer.message}",
                queue=self.queue,
                message_id=mid,
            )
            return None
        grant = answer
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

    # -- waiting for wake-ups -----------------------------------------------------------------

    def idle_wait(self) -> None:
        """Nothing to read: wait for the engine's wake-up on this queue (`workers.wakeups`), at
        most `idle_wait` seconds; without wake-ups, or with the server away, the poll interval."""
        if not self.config.wakeups:
            super().idle_wait()
            return
        if self._waiter is None:
            peek = psql.SQL("select exists (select from pgmq.{} where vt <= clock_timestamp())").format(
                psql.Identifier(f"q_{self.queue}"))  # fmt: skip
            self._waiter = Waiter(self.url, f"engine_queue_{self.queue}", self.name,
                                  lambda conn: conn.execute(peek).fetchone() == (True,), pipelined=True,
                                  timed=self.timed)  # fmt: skip
        if not self._waiter.wait(self.config.idle_wait, lambda: self.stopping, self._stop.wait) and \
                self._waiter.conn is None:  # fmt: skip
            super().idle_wait()

    def busy(self) -> None:
        if self._waiter is not None:
            self._waiter.busy()

    def close(self) -> None:
        if self._waiter is not None:
            self._waiter.close()
        super().close()
        if self.followup is not None:  # after the handlers: their last settlements are handed over first
            self.followup.close()
            self.followup = None

    # -- handler and settlement ---------------------------------------------------------------

    def _execute(self, grant: v2.Grant) -> None:
        self.execute(grant)

    def execute(self, grant: v2.Grant) -> SettlementRecord | None:
        """Run the handler for `grant` (a claim or a takeover's new claim) and settle it; None
        when the worker is closing (the claim stays current, left to takeover)."""
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
            return None
        return self.settle(grant, outcome, result)

    # -- seams: documented points where the negative controls put a realistic worker defect ---

    def encode_result(self, value: Json) -> Json:
        """The handler's value as it is settled: exactly as returned (`None` is JSON null;
        0, false, "", [] and {} stay what they are)."""
        return ensure_json(value)

    def resubmission(self, outcome: v2.Outcome, result: Json) -> tuple[v2.Outcome, Json]:
        """What is resubmitted after a transport error: the same settlement. A transport error
        is never a handler failure."""
        return outcome, result

    def time_left(self, grant: v2.Grant) -> float:
        """Seconds until the claim's lease horizon, by this machine's clock."""
        return (grant.lease_expires_at - dt.datetime.now(dt.UTC)).total_seconds()

    def counts_as_submitted(self, attempt: AttemptRecord) -> bool:
        """Whether a failed try counts against the bound of `settlement_attempts`: it does once
        the settlement was handed to a connection; a connect that failed sent nothing."""
        return attempt.result != "unreachable"

    def retry_delay(self, tries: int, left: float) -> float:
        """The pause before the next try: doubling from 50 ms to a cap of 1 s, with jitter, and
        never so long that the next try could not complete before the horizon (inside the last
        `RESERVE` seconds it waits out the horizon instead of trying again)."""
        ceiling = min(RETRY_CAP, RETRY_INITIAL * 2 ** min(max(tries - 1, 0), 30))
        pause = ceiling / 2 + random.uniform(0, ceiling / 2)
        if left <= RESERVE:  # no time for another try to complete: wait out the horizon, do not spin
            return max(0.0, left)
        return float(min(pause, left - RESERVE))

    def settlement_wait(self, left: float) -> float:
        """How long a try may wait for a connection: what is left of the lease, less the reserve."""
        return max(0.0, left - RESERVE)

    def settle(self, grant: v2.Grant, outcome: v2.Outcome, result: Json) -> SettlementRecord:
        """Settle `grant` before its lease horizon. Tries are spread over the time left (capped
        backoff with jitter); a try that reached a connection counts against
        `settlement_attempts` (the contract's bound on resubmissions), a connect that failed
        does not, so an outage shorter than the time left costs no takeover. A transport error
        resubmits the same settlement (a replay is answered `replayed`)."""
        record = SettlementRecord(
            grant.claim_id, grant.run_id, grant.step_slug, outcome, result, grant.lease_expires_at
        )
        with self._lock:
            self.stats.settlements.append(record)
        submitted = tries = 0
        while True:
            if self.closing:
                record.final = "shutdown"
                self._error(ShutdownRequested(f"settling claim {grant.claim_id} stopped by shutdown"))
                break
            left = self.time_left(grant)
            if left <= 0:
                record.final = "deadline_exceeded"
                self._error(
                    DeadlineExceeded(
                        f"claim {grant.claim_id}: lease horizon {grant.lease_expires_at} passed after "
                        f"{tries} tries ({submitted} submitted); left to takeover"
                    )
                )
                break
            if submitted >= self.settlement_attempts:
                record.final = "gave_up"
                self.log(
                    logging.ERROR,
                    "settlement_gave_up",
                    f"claim {grant.claim_id}: {submitted} submitted settlement attempts failed in transport "
                    f"with {left:.1f} s of lease left; the claim stays current and is left to takeover",
                )
                break
            tries += 1
            last = self._attempt(tries, grant, outcome, result, self.settlement_wait(left))
            record.attempts.append(last)
            if last.result == "receipt":
                record.final = str(last.verdict)
                break
            if last.result in ("deadline", "rejected"):
                record.final = "deadline_exceeded" if last.result == "deadline" else "rejected"
                break
            last.submitted = self.counts_as_submitted(last)
            submitted += last.submitted
            if last.result == "transport_error":
                outcome, result = self.resubmission(outcome, result)
            time.sleep(self.retry_delay(tries, self.time_left(grant)))  # bounded by the horizon
        with self._lock:
            self.stats.verdicts[record.final] += 1
        return record

    def _attempt(self, attempt: int, grant: v2.Grant, outcome: v2.Outcome, result: Json, wait: float) -> AttemptRecord:
        """One try, in the next settlement group (`workers/settle_groups.py`); logged as alone."""
        rec = self.groups.attempt(attempt, grant, outcome, result, wait)
        if rec.result == "transport_error":
            self.stats.transport_errors += 1
            view = "indeterminate (the commit was sent, its reply lost)" if rec.indeterminate else "not committed"
            self._error(TransportError(f"claim {grant.claim_id} attempt {attempt}: {rec.error}; client view: "
                                       f"{view}; xid {rec.xid}"))  # fmt: skip
        elif rec.result == "rejected":
            self._error(ReportRejected(f"claim {grant.claim_id} attempt {attempt}: {rec.error}"))
        elif rec.result == "deadline":
            self._error(DeadlineExceeded(f"claim {grant.claim_id} attempt {attempt}: {rec.error}"))
        elif self.log.enabled(logging.INFO):  # the hot path builds no message nobody reads
            self.log(logging.INFO, "settled", f"claim {grant.claim_id}: {rec.verdict} (attempt {attempt})",
                     claim_id=str(grant.claim_id))  # fmt: skip
        return rec

    def _error(self, exc: Exception) -> None:
        with self._lock:
            self.stats.errors.append(f"{type(exc).__name__}: {exc}")
        self.log(
            logging.ERROR if not isinstance(exc, ShutdownRequested) else logging.WARNING,
            type(exc).__name__,
            str(exc),
        )
