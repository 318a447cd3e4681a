"""The reconciler driver: a loop that calls `engine.v2_reconcile_next`, one run per call.

Each call takes the next due run (dirty, not in `attention`, past `next_attempt_at` when backing
off) that no other session holds (SKIP LOCKED), so several reconcilers side by side share the work
and a poisoned run costs at most one failing call per backoff period. Calls travel `pipeline` at a
time in one round trip, each its own transaction. When nothing is due it waits for the engine's
wake-up (`engine_v2_dirty`) with a bounded fallback poll. It is what the evidence and the
benchmarks run; it is not a service.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from uuid import UUID

import psycopg

from evidence_lib.engine import v2
from evidence_lib.pg.db import Conn, ServerUnavailable, connect
from evidence_lib.workers.config import SafeLog
from evidence_lib.workers.connections import ConnectionSource, ReconnectPolicy
from evidence_lib.workers.timing import CallTimes, maybe_timed
from evidence_lib.workers.wakeups import Waiter

# the run a refused call picked: the first due run in v2_reconcile_next's order (read by the owner)
DUE_RUNS = """select run_id from engine.run_work
 where requested_generation > processed_generation
   and health <> 'attention'
   and (health <> 'backoff' or next_attempt_at <= clock_timestamp())
   and run_id <> all (%(skip)s::uuid[])
 order by next_attempt_at nulls first, run_id limit %(limit)s"""


BACKOFF_LOOK = 0.25  # seconds between looks while a run is in backoff (its next attempt comes unannounced)


@dataclass
class ReconcilerStats:
    passes: int = 0
    calls: int = 0
    actions: int = 0
    reports: Counter[str] = field(default_factory=Counter)  # health after each call
    errors: list[str] = field(default_factory=list)
    transport_errors: int = 0
    round_trips: int = 0


class Reconciler:
    """Reconciles due runs until stopped; each call is one run, one transaction."""

    def __init__(
        self,
        url: str,
        *,
        max_actions: int = 8,
        batch: int = 32,
        pipeline: int = 8,
        poll_interval: float = 0.05,
        idle_wait: float = 4.0,
        wakeups: bool = True,
        name: str = "reconciler",
        logger: logging.Logger | None = None,
        policy: ReconnectPolicy | None = None,
    ) -> None:
        self.url = url
        self.max_actions = max_actions
        self.batch = batch
        self.pipeline = max(1, pipeline)
        self.poll_interval = poll_interval
        self.idle_wait = idle_wait
        self.wakeups = wakeups
        self.name = name
        self.log = SafeLog(logger or logging.getLogger("evidence_lib.reconciler"))
        self.stats = ReconcilerStats()
        self._stop = threading.Event()
        self.timings: CallTimes | None = None  # set to a CallTimes to measure every SQL call
        self.refused: set[UUID] = set()  # runs whose reconcile was refused: skipped from then on
        self.backing_off: set[UUID] = set()  # runs last seen in backoff: due later without a wake-up
        self.source = ConnectionSource(
            url, size=1, policy=policy, application_name=name, log=lambda lv, ev, msg: self.log(lv, ev, msg)
        )
        self.waiter = Waiter(url, "engine_v2_dirty", name, lambda conn: self.reconcile_next(conn) is not None,
                             timed=self.timed)  # fmt: skip

    def timed(self, name: str) -> AbstractContextManager[None]:
        """Measure one SQL round trip when `timings` is set (the benchmarks set it)."""
        return maybe_timed(self.timings, name)

    def due_runs(self, conn: Conn) -> list[UUID]:
        """The runs that are due now, in v2_reconcile_next's order (the first is the one it takes)."""
        with self.timed("reconcile.due_runs"):
            rows = conn.execute(DUE_RUNS, {"skip": list(self.refused), "limit": self.batch}).fetchall()
        return [r[0] for r in rows]

    def _report(self, report: v2.Report) -> v2.Report:
        self.stats.calls += 1
        self.stats.actions += report.actions
        self.stats.reports[report.health] += 1
        if report.health == "backoff":
            self.backing_off.add(report.run_id)
        else:
            self.backing_off.discard(report.run_id)
        if report.health != "clean":
            self.log(
                logging.WARNING,
                "run_unhealthy",
                f"run {report.run_id}: health {report.health} after reconcile",
                run_id=str(report.run_id),
            )
        return report

    def reconcile_next(self, conn: Conn) -> v2.Report | None:
        """Reconcile the next due run (None: nothing is due, or its reconcile was refused). A run
        whose reconcile is refused (DR005, ...) is remembered and skipped, so it never blocks the
        others."""
        try:
            self.stats.round_trips += 1
            with self.timed("v2_reconcile"):
                report = v2.reconcile_next(conn, self.max_actions, list(self.refused))
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            self._refused(conn, exc)
            return None
        return None if report is None else self._report(report)

    def _refused(self, conn: Conn, exc: psycopg.Error) -> None:
        runs = self.due_runs(conn)
        run_id = runs[0] if runs else None
        if run_id is not None:
            self.refused.add(run_id)
        self.stats.errors.append(f"{run_id}: [{exc.sqlstate}] {exc.diag.message_primary}")
        self.log(
            logging.ERROR,
            "reconcile_refused",
            f"run {run_id}: reconcile refused [{exc.sqlstate}] {exc.diag.message_primary}; skipped from now on",
        )

    def pass_once(self, conn: Conn) -> int:
        """Reconcile due runs until none is due or `batch` calls were made; returns the calls that
        reconciled a run. A pass starts with one call per round trip and doubles it, up to
        `pipeline`, while every call finds a run: an idle look costs one transaction, not
        `pipeline` of them, and a backlog still travels `pipeline` calls at a time."""
        self.stats.passes += 1
        calls, depth = 0, 1
        while calls < self.batch:
            refused = len(self.refused)
            self.stats.round_trips += 1
            with self.timed("v2_reconcile"):
                answers = v2.reconcile_next_many(conn, min(depth, self.batch - calls), self.max_actions,
                                                 list(self.refused))  # fmt: skip
            done = 0
            for answer in answers:
                if isinstance(answer, v2.ClaimUnanswered):  # a refused call: alone, for its error
                    answer = self.reconcile_next(conn)
                if answer is not None:
                    self._report(answer)
                    done += 1
            calls += done
            if done < len(answers) and len(self.refused) == refused:
                break  # something came back with nothing due (a refused run is skipped and the pass goes on)
            depth = min(self.pipeline, depth * 2)
        return calls

    def drain(self) -> None:
        """Reconcile until no run is due (runs in backoff or attention are left as they are)."""
        with connect(self.url, application_name=self.name) as conn:
            while self.pass_once(conn):
                pass

    def run(self) -> ReconcilerStats:
        """Loop until `stop()`: reconcile while runs are due, then wait for a wake-up (at most
        `idle_wait` s). When the server goes away it waits with the reconnect policy's capped
        backoff and logs one line when the server goes and one when it is back."""
        while not self._stop.is_set():
            try:
                # the wait covers one backoff pause and one connect: no spinning while the server is away
                wait = self.source.policy.cap + self.source.policy.connect_timeout
                with self.source.connection(timeout=wait) as conn:
                    idle = self.poll_interval
                    while not self._stop.is_set():
                        if self.pass_once(conn) > 0:
                            self.waiter.busy()
                            idle = self.poll_interval
                        elif self.wakeups:
                            # a run in backoff becomes due with no wake-up: look again soon while one is
                            wait_for = min(self.idle_wait, BACKOFF_LOOK) if self.backing_off else self.idle_wait
                            if not self.waiter.wait(wait_for, self._stop.is_set, self._stop.wait) and \
                                    self.waiter.conn is None:  # fmt: skip
                                self._stop.wait(self.poll_interval)
                        else:  # polling: nothing due, back off up to 16x the interval
                            self._stop.wait(idle)
                            idle = min(idle * 2, self.poll_interval * 16)
            except (psycopg.OperationalError, ServerUnavailable) as exc:
                self.stats.errors.append(f"transport: {str(exc).strip()[:200]}")
                self.stats.transport_errors += 1
        self.waiter.close()
        self.source.close()
        return self.stats

    def stop(self) -> None:
        self._stop.set()
