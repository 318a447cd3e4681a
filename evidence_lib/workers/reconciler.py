"""The reconciler driver: a loop that calls `v2_reconcile` for dirty runs, one run per call.

It picks only runs that are due (dirty, not in `attention`, past `next_attempt_at` when
backing off), so a poisoned run costs at most one failing call per backoff period and never
stalls the others. It is what the evidence and the benchmarks run; it is not a service.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from uuid import UUID

import psycopg
from psycopg.rows import class_row

from evidence_lib.engine import v2
from evidence_lib.pg.db import Conn, ServerUnavailable, connect
from evidence_lib.workers.config import SafeLog
from evidence_lib.workers.connections import ConnectionSource, ReconnectPolicy
from evidence_lib.workers.timing import CallTimes, maybe_timed

DUE = """
  from engine.run_work
 where requested_generation > processed_generation
   and health <> 'attention'
   and (health <> 'backoff' or next_attempt_at <= clock_timestamp())
   and run_id <> all (%(skip)s::uuid[])
"""
DUE_RUNS = "select run_id" + DUE + " order by next_attempt_at nulls first, run_id limit %(limit)s"
# one due run and its reconcile in one statement: still one run per call, one transaction
RECONCILE_NEXT = (
    "select r.* from (select run_id" + DUE + " order by next_attempt_at nulls first, run_id limit 1) d"
    " cross join lateral engine.v2_reconcile(d.run_id, %(max_actions)s) r"
)


@dataclass
class ReconcilerStats:
    passes: int = 0
    calls: int = 0
    actions: int = 0
    reports: Counter[str] = field(default_factory=Counter)  # health after each call
    errors: list[str] = field(default_factory=list)
    transport_errors: int = 0


class Reconciler:
    """Reconciles due runs until stopped; each call is one run, one transaction."""

    def __init__(
        self,
        url: str,
        *,
        max_actions: int = 8,
        batch: int = 32,
        poll_interval: float = 0.05,
        name: str = "reconciler",
        logger: logging.Logger | None = None,
        policy: ReconnectPolicy | None = None,
    ) -> None:
        self.url = url
        self.max_actions = max_actions
        self.batch = batch
        self.poll_interval = poll_interval
        self.name = name
        self.log = SafeLog(logger or logging.getLogger("evidence_lib.reconciler"))
        self.stats = ReconcilerStats()
        self._stop = threading.Event()
        self.timings: CallTimes | None = None  # set to a CallTimes to measure every SQL call
        self.refused: set[UUID] = set()  # runs whose reconcile was refused: skipped from then on
        self.source = ConnectionSource(
            url, size=1, policy=policy, application_name=name, log=lambda lv, ev, msg: self.log(lv, ev, msg)
        )

    def timed(self, name: str) -> AbstractContextManager[None]:
        """Measure one SQL round trip when `timings` is set (the benchmarks set it)."""
        return maybe_timed(self.timings, name)

    def due_runs(self, conn: Conn) -> list[UUID]:
        """The runs that are due now (dirty, not in attention, backoff over), oldest first."""
        with self.timed("reconcile.due_runs"):
            rows = conn.execute(DUE_RUNS, {"skip": list(self.refused), "limit": self.batch}).fetchall()
        return [r[0] for r in rows]

    def reconcile_next(self, conn: Conn) -> v2.Report | None:
        """Reconcile the next due run (None: nothing is due). A run whose reconcile is refused
        (DR005, ...) is remembered and skipped, so it never blocks the others."""
        try:
            with self.timed("v2_reconcile"), conn.cursor(row_factory=class_row(v2.Report)) as cur:
                report = cur.execute(
                    RECONCILE_NEXT, {"skip": list(self.refused), "max_actions": self.max_actions}
                ).fetchone()
        except psycopg.OperationalError:
            raise
        except psycopg.Error as exc:
            run_id = self._refused_run(conn)
            if run_id is not None:
                self.refused.add(run_id)
            self.stats.errors.append(f"{run_id}: [{exc.sqlstate}] {exc.diag.message_primary}")
            self.log(
                logging.ERROR,
                "reconcile_refused",
                f"run {run_id}: reconcile refused [{exc.sqlstate}] {exc.diag.message_primary}; skipped from now on",
            )
            return None
        if report is None:
            return None
        self.stats.calls += 1
        self.stats.actions += report.actions
        self.stats.reports[report.health] += 1
        if report.health != "clean":
            self.log(
                logging.WARNING,
                "run_unhealthy",
                f"run {report.run_id}: health {report.health} after reconcile",
                run_id=str(report.run_id),
            )
        return report

    def _refused_run(self, conn: Conn) -> UUID | None:
        """The run the failed statement picked: the first due run in the same order."""
        runs = self.due_runs(conn)
        return runs[0] if runs else None

    def pass_once(self, conn: Conn) -> int:
        """Reconcile due runs until none is due or `batch` calls were made; returns the calls."""
        self.stats.passes += 1
        calls = 0
        while calls < self.batch:
            refused = len(self.refused)
            if self.reconcile_next(conn) is None and len(self.refused) == refused:
                break  # nothing due (a refused run is skipped and the pass goes on)
            calls += 1
        return calls

    def drain(self) -> None:
        """Reconcile until no run is due (runs in backoff or attention are left as they are)."""
        with connect(self.url, application_name=self.name) as conn:
            while self.pass_once(conn):
                pass

    def run(self) -> ReconcilerStats:
        """Loop until `stop()`. When the server goes away it waits with the reconnect policy's
        capped backoff and logs one line when the server goes and one when it is back."""
        while not self._stop.is_set():
            try:
                # the wait covers one backoff pause and one connect: no spinning while the server is away
                wait = self.source.policy.cap + self.source.policy.connect_timeout
                with self.source.connection(timeout=wait) as conn:
                    idle = self.poll_interval
                    while not self._stop.is_set():
                        if self.pass_once(conn) == 0:  # nothing due: back off up to 16x the interval
                            self._stop.wait(idle)
                            idle = min(idle * 2, self.poll_interval * 16)
                        else:
                            idle = self.poll_interval
            except (psycopg.OperationalError, ServerUnavailable) as exc:
                self.stats.errors.append(f"transport: {str(exc).strip()[:200]}")
                self.stats.transport_errors += 1
        self.source.close()
        return self.stats

    def stop(self) -> None:
        self._stop.set()
