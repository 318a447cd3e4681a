"""The reconciler driver: a loop that calls `v2_reconcile` for dirty runs, one run per call.

It picks only runs that are due (dirty, not in `attention`, past `next_attempt_at` when
backing off), so a poisoned run costs at most one failing call per backoff period and never
stalls the others. It is what the evidence and the benchmarks run; it is not a service.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field
from uuid import UUID

import psycopg

from evidence_lib import engine_v2 as v2
from evidence_lib.db import Conn, ServerUnavailable, connect
from evidence_lib.worker_common import SafeLog

DUE_RUNS = """
select run_id
  from engine.run_work
 where requested_generation > processed_generation
   and health <> 'attention'
   and (health <> 'backoff' or next_attempt_at <= clock_timestamp())
 order by next_attempt_at nulls first, run_id
 limit %s
"""


@dataclass
class ReconcilerStats:
    passes: int = 0
    calls: int = 0
    actions: int = 0
    reports: Counter[str] = field(default_factory=Counter)  # health after each call
    errors: list[str] = field(default_factory=list)


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
    ) -> None:
        self.url = url
        self.max_actions = max_actions
        self.batch = batch
        self.poll_interval = poll_interval
        self.name = name
        self.log = SafeLog(logger or logging.getLogger("evidence_lib.reconciler"))
        self.stats = ReconcilerStats()
        self._stop = threading.Event()

    def due_runs(self, conn: Conn) -> list[UUID]:
        return [r[0] for r in conn.execute(DUE_RUNS, (self.batch,)).fetchall()]

    def pass_once(self, conn: Conn) -> int:
        """Reconcile every due run once; returns how many calls were made."""
        runs = self.due_runs(conn)
        self.stats.passes += 1
        for run_id in runs:
            try:
                report = v2.reconcile(conn, run_id, self.max_actions)
            except psycopg.OperationalError:
                raise
            except psycopg.Error as exc:  # a refusal (DR005, ...) is about that run only
                self.stats.errors.append(f"{run_id}: [{exc.sqlstate}] {exc.diag.message_primary}")
                self.log(
                    logging.ERROR,
                    "reconcile_refused",
                    f"run {run_id}: reconcile refused [{exc.sqlstate}] {exc.diag.message_primary}",
                )
                continue
            self.stats.calls += 1
            self.stats.actions += report.actions
            self.stats.reports[report.health] += 1
            if report.health != "clean":
                self.log(
                    logging.WARNING,
                    "run_unhealthy",
                    f"run {run_id}: health {report.health} after reconcile",
                    run_id=str(run_id),
                )
        return len(runs)

    def drain(self) -> None:
        """Reconcile until no run is due (runs in backoff or attention are left as they are)."""
        with connect(self.url, application_name=self.name) as conn:
            while self.pass_once(conn):
                pass

    def run(self) -> ReconcilerStats:
        """Loop until `stop()`; reconnects after a transport error."""
        while not self._stop.is_set():
            try:
                with connect(self.url, application_name=self.name) as conn:
                    while not self._stop.is_set():
                        if self.pass_once(conn) == 0:
                            self._stop.wait(self.poll_interval)
            except (psycopg.OperationalError, ServerUnavailable) as exc:
                self.stats.errors.append(f"transport: {exc}")
                self.log(logging.ERROR, "TransportError", f"reconciler {self.name}: {exc}")
                self._stop.wait(self.poll_interval)
        return self.stats

    def stop(self) -> None:
        self._stop.set()
