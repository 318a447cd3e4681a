"""A competing load: the machine's cores kept busy while races run, so a transcript that depends on
the scheduler (which session the kernel happens to run first) shows up before it reaches a bundle.

Two sources, both real: one busy process per core (the scheduler's share of CPU for the race's
sessions and server backends drops and varies), and writer sessions on a database of their own on
the same server (WAL, dead rows, autovacuum, checkpoints: the server's own background work that a
bundle's other scenarios cause). Nothing here orders the race's sessions; it only removes the
quiet machine that can hide a race of the scheduler.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as ProcessEvent

import psycopg

from evidence_lib.pg import db
from evidence_lib.pg.db import Server, connect

WRITER_ROWS = 2000  # rows each writer churns through (inserted, updated, deleted) per round


def _burn(stop: ProcessEvent) -> None:
    spins = 0
    while not stop.is_set():
        for _ in range(100_000):
            spins += 1


@dataclass
class LoadReport:
    """What the load did, for the report: busy processes and the writers' committed rounds."""

    processes: int = 0
    writers: int = 0
    rounds: int = 0
    errors: list[str] = field(default_factory=list)

    def describe(self) -> str:
        text = f"{self.processes} busy processes, {self.writers} writer sessions ({self.rounds} committed rounds)"
        return text + (f"; writer errors: {self.errors[:2]}" if self.errors else "")


def _writer(url: str, stop: threading.Event, report: LoadReport, lock: threading.Lock, index: int) -> None:
    table = f"churn_{index}"
    try:
        with connect(url, application_name=f"load_writer_{index}") as conn:
            conn.execute(f"create table if not exists {table} (id bigint primary key, body text)".encode())
            while not stop.is_set():
                with conn.transaction():
                    conn.execute(
                        f"insert into {table} select g, repeat('x', 200) from generate_series(1, {WRITER_ROWS}) g "
                        "on conflict (id) do update set body = excluded.body".encode()
                    )
                with conn.transaction():
                    conn.execute(f"update {table} set body = md5(body) where id % 3 = 0".encode())
                with conn.transaction():
                    conn.execute(f"delete from {table} where id % 2 = 0".encode())
                with lock:
                    report.rounds += 1
    except psycopg.Error as exc:
        if not stop.is_set():
            with lock:
                report.errors.append(f"{type(exc).__name__}: {exc}".splitlines()[0])


@contextlib.contextmanager
def competing_load(server: Server | None, *, processes: int | None = None, writers: int = 2) -> Iterator[LoadReport]:
    """Keep every core busy (`processes`, default one per core) and `writers` sessions writing on a
    scratch database of `server` while the block runs; everything stops and is removed after."""
    report = LoadReport(processes=processes if processes is not None else (os.cpu_count() or 2))
    context = multiprocessing.get_context("spawn")
    stop_processes = context.Event()
    burners = [context.Process(target=_burn, args=(stop_processes,), daemon=True) for _ in range(report.processes)]
    stop_writers = threading.Event()
    lock = threading.Lock()
    with contextlib.ExitStack() as stack:
        threads: list[threading.Thread] = []
        if server is not None and writers:
            url = stack.enter_context(db.scratch_database(server, prefix="load"))
            report.writers = writers
            threads = [
                threading.Thread(target=_writer, args=(url, stop_writers, report, lock, i), daemon=True)
                for i in range(writers)
            ]
        for process in burners:
            process.start()
        for thread in threads:
            thread.start()
        try:
            yield report
        finally:
            stop_processes.set()
            stop_writers.set()
            for process in burners:
                process.join(timeout=5)
                if process.is_alive():
                    process.kill()
            for thread in threads:
                thread.join(timeout=10)
