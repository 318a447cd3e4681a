"""A worker's own reconciler: the runs its settlements just made dirty are reconciled right after,
without waiting for a reconciler to find them (issue 33). It runs in a thread of its own, on a
connection of its own with the role given (`WorkerConfig.reconcile_url`: an `engine_operator`
login; a worker's role may not reconcile), and reconciles everything handed to it since its last
call in one transaction (`engine.v2_reconcile_all`, each run its own call in a subtransaction).

The contract is unchanged: A's settlement commits on its own, with no reconciler; B is created
only by a later, separately committed reconcile; a run this reconciler misses (its process dies,
the server goes away) stays dirty and any reconciler finds it (`v2_reconcile_next`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from uuid import UUID

import psycopg

from evidence_lib.engine.v2_groups import MAX_ITEMS, Refused, reconcile_all
from evidence_lib.pg.db import Conn, ServerUnavailable, connect

Log = Callable[..., None]
WAIT = 0.5  # seconds between two looks at the stop request while nothing is handed over


class FollowUp:
    def __init__(self, url: str, name: str, log: Log) -> None:
        self.url, self.name, self.log = url, name, log
        self.reconciled = 0
        self.calls = 0
        self.disabled = ""  # why it stopped for good (the role may not reconcile)
        self._runs: dict[UUID, None] = {}
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._conn: Conn | None = None
        self._thread = threading.Thread(target=self._loop, name=f"{name}-reconciler", daemon=True)
        self._thread.start()

    def hand(self, run_ids: list[UUID]) -> None:
        """Reconcile these runs soon (each once, however often handed before the next call)."""
        if self.disabled:
            return
        with self._lock:
            self._runs.update(dict.fromkeys(run_ids))
        self._ready.set()

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._ready.set()
        self._thread.join(timeout)
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._ready.wait(WAIT)
            self._ready.clear()
            with self._lock:
                batch = list(self._runs)[:MAX_ITEMS]
                for run in batch:
                    del self._runs[run]
                if self._runs:
                    self._ready.set()
            if batch:
                self._reconcile(batch)

    def _reconcile(self, runs: list[UUID]) -> None:
        try:
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.url, application_name=f"{self.name}_reconciler")
            answers = reconcile_all(self._conn, runs)
        except psycopg.errors.InsufficientPrivilege as exc:
            self.disabled = f"this role may not reconcile: {exc.diag.message_primary}"
            self.log(logging.WARNING, "followup_disabled", f"the worker's reconciler stops: {self.disabled}; the "
                     "runs it settles are left to a standalone reconciler")  # fmt: skip
            return
        except (psycopg.Error, ServerUnavailable) as exc:  # the runs stay dirty: any reconciler finds them
            self.log(logging.WARNING, "followup_failed", f"reconciling {len(runs)} runs failed ({exc}); they stay "
                     "dirty for any reconciler")  # fmt: skip
            with contextlib.suppress(psycopg.Error):
                if self._conn is not None:
                    self._conn.close()
            self._conn = None
            return
        self.calls += 1
        self.reconciled += len(runs)
        for run, answer in zip(runs, answers, strict=True):
            if isinstance(answer, Refused):
                self.log(logging.WARNING, "followup_refused", f"run {run}: reconcile refused [{answer.sqlstate}] "
                         f"{answer.message}; it stays dirty for any reconciler", run_id=str(run))  # fmt: skip
