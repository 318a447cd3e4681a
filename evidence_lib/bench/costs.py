"""What a measuring window cost the server, read back after the fact (issue 33, part 1).

- **WAL** (`pg_walinspect`, PostgreSQL 15+): the bytes written between the window's two insert
  positions, and every record between them by type. From the records: commits and aborts that
  wrote (`Transaction/COMMIT`, `ABORT`; a read-only transaction writes none, and it costs no
  flush), row locks taken (`Heap/LOCK`, `Heap2/LOCK_UPDATED`: every `for update`, `for no key
  update`, `for share` and foreign-key `for key share` that locks a row writes one), rows
  inserted, updated (and how many of the updates were HOT), deleted, and full-page images.
- **Lock waits**: the window's backends of the case's database, sampled every `SAMPLE_EVERY` s
  from `pg_stat_activity` (wait-event sampling): of the samples that found a backend running a
  statement, the share that waited on a heavyweight lock, and on which kind (`relation`,
  `tuple`, `transactionid`, `advisory`, ...).

Both need nothing from the participants, and every system is read the same way. When the
server lacks `pg_walinspect` or the role may not use it, the WAL figures are None with a note.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

from evidence_lib.errors import EvidenceError
from evidence_lib.pg.db import connect, one

SCHEMA = "perf_wal"  # the case's scratch database gets pg_walinspect in a schema of its own
SAMPLE_EVERY = 0.02  # seconds between two looks at pg_stat_activity (50 small reads per second)
FLUSH_DEADLINE = 3.0  # seconds the WAL writer gets to flush the window's last records (liveness)
COMMITS = ("Transaction/COMMIT", "Transaction/COMMIT_PREPARED")
ABORTS = ("Transaction/ABORT", "Transaction/ABORT_PREPARED")
ROW_LOCKS = ("Heap/LOCK", "Heap2/LOCK_UPDATED")
INSERTS = ("Heap/INSERT", "Heap/INSERT+INIT")
UPDATES = ("Heap/UPDATE", "Heap/UPDATE+INIT", "Heap/HOT_UPDATE", "Heap/HOT_UPDATE+INIT")
HOT = ("Heap/HOT_UPDATE", "Heap/HOT_UPDATE+INIT")
DELETES = ("Heap/DELETE",)


@dataclass
class WindowCosts:
    """One window's WAL and lock waits; `per_unit` divides them by the units the window did."""

    wal_bytes: int | None = None
    records: dict[str, int] = field(default_factory=dict)  # WAL record type -> count
    fpi_bytes: int | None = None
    active_samples: int = 0  # samples of a backend of the database running a statement
    lock_waits: Counter[str] = field(default_factory=Counter)  # heavyweight lock kind -> samples
    note: str = ""

    def add_note(self, text: str) -> None:
        self.note = f"{self.note}; {text}" if self.note else text

    def count(self, kinds: tuple[str, ...]) -> int:
        return sum(self.records.get(k, 0) for k in kinds)

    def per_unit(self, units: int) -> dict[str, Any]:
        """The figures of one unit (one run, one message): None where not measured."""
        wal = self.wal_bytes is not None and units > 0

        def each(kinds: tuple[str, ...]) -> float | None:
            return round(self.count(kinds) / units, 2) if wal else None

        updates = self.count(UPDATES)
        waited = sum(self.lock_waits.values())
        return {
            "commits_per_unit": each(COMMITS),
            "aborts_per_unit": each(ABORTS),
            "wal_bytes_per_unit": round(self.wal_bytes / units) if wal and self.wal_bytes is not None else None,
            # full-page images: written after each checkpoint, so they depend on where one fell
            "wal_fpi_bytes_per_unit": round(self.fpi_bytes / units) if wal and self.fpi_bytes is not None else None,
            "row_locks_per_unit": each(ROW_LOCKS),
            "rows_inserted_per_unit": each(INSERTS),
            "rows_updated_per_unit": each(UPDATES),
            "hot_update_share": round(self.count(HOT) / updates, 3) if wal and updates else None,
            "rows_deleted_per_unit": each(DELETES),
            "lock_wait_share": round(waited / self.active_samples, 3) if self.active_samples else None,
            "lock_waits": ", ".join(f"{k} {v}" for k, v in self.lock_waits.most_common(4)),
        }


class WalNotFlushed(EvidenceError):
    """The window's last WAL records were not flushed within FLUSH_DEADLINE."""


class WalWindow:
    """The WAL written between `start()` and `stop()`, read with `pg_walinspect` on `url` (the
    extension is created in that database, a scratch database of the case)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.note = ""
        self.begin: str | None = None
        try:
            with connect(url, application_name="perf_wal") as conn:
                conn.execute(f"create schema if not exists {SCHEMA}")
                conn.execute(f"create extension if not exists pg_walinspect schema {SCHEMA}")
        except psycopg.Error as exc:
            self.note = f"WAL not read (pg_walinspect unavailable: {type(exc).__name__})"

    def _insert_position(self, conn: Any) -> str:
        return str(one(conn, "select pg_catalog.pg_current_wal_insert_lsn()"))

    def start(self) -> None:
        if self.note:
            return
        with connect(self.url, application_name="perf_wal") as conn:
            self.begin = self._insert_position(conn)

    def stop(self, costs: WindowCosts, end: str | None = None) -> None:
        """Fill `costs` with the bytes and records from `begin` (`start()`, or a position the
        caller read with its own count) to `end` (default: now)."""
        if self.note:
            costs.add_note(self.note)
        if self.note or self.begin is None:
            return
        with connect(self.url, application_name="perf_wal") as conn:
            end = end or self._insert_position(conn)
            try:
                deadline = time.monotonic() + FLUSH_DEADLINE
                while not one(conn, "select pg_catalog.pg_current_wal_flush_lsn() >= %s::pg_lsn", (end,)):
                    if time.monotonic() > deadline:
                        raise WalNotFlushed(f"the WAL up to {end} was not flushed within {FLUSH_DEADLINE} s")
                    time.sleep(0.01)  # a liveness poll: the WAL writer flushes on its own
                found = conn.execute(
                    f"select * from {SCHEMA}.pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn, true)", (self.begin, end)
                ).fetchall()
                costs.wal_bytes = int(one(conn, "select pg_catalog.pg_wal_lsn_diff(%s, %s)", (end, self.begin)))
            except (psycopg.Error, WalNotFlushed) as exc:
                costs.add_note(f"WAL not read ({type(exc).__name__}: {str(exc).splitlines()[0]})")
                return
        # columns: record type, count, count %, record bytes, %, full-page-image bytes, %, ...
        costs.records = {str(r[0]): int(r[1]) for r in found if int(r[1])}
        costs.fpi_bytes = sum(int(r[5]) for r in found)


class WaitSampler:
    """Wait-event sampling of the database's other backends while the window is open."""

    QUERY = (
        "select wait_event_type, wait_event from pg_catalog.pg_stat_activity "
        "where datname = pg_catalog.current_database() and pid <> pg_catalog.pg_backend_pid() "
        "and state = 'active' and backend_type = 'client backend'"
    )

    def __init__(self, url: str, costs: WindowCosts) -> None:
        self.url, self.costs = url, costs
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._sample, name="perf_waits", daemon=True)
        self.failed = ""  # why the sampler stopped early, if it did

    def __enter__(self) -> WaitSampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join(5.0)
        if self.thread.is_alive() or self.failed:
            self.costs.active_samples, self.costs.lock_waits = 0, Counter()  # not a sample of the window
            self.costs.add_note(self.failed or "lock waits not sampled (the sampler did not stop)")

    def _sample(self) -> None:
        try:
            with connect(self.url, application_name="perf_waits") as conn:
                while not self.stop_event.wait(SAMPLE_EVERY):
                    conn.execute("select pg_catalog.pg_stat_clear_snapshot()")
                    for kind, event in conn.execute(self.QUERY).fetchall():
                        self.costs.active_samples += 1
                        if kind == "Lock":
                            self.costs.lock_waits[str(event)] += 1
        except (psycopg.Error, EvidenceError) as exc:
            self.failed = f"lock waits not sampled ({type(exc).__name__})"
