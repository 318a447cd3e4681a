"""A worker pool speaking the released anchor's protocol, the way its own flow worker does (the
edge worker's defaults): `pgmq.read_with_poll` waiting up to 2 s at a 100 ms interval for a batch
of up to 10 messages, then `pgflow.start_tasks` for the messages read, then each handler (at most
10 in flight) and `pgflow.complete_task` per task, whose transaction also starts the next ready
steps. It uses no LISTEN/NOTIFY. Same connection source and handler pool as this engine's
workers, so the two pools compare like for like.

A benchmark stand-in, not a client of ours: it lives with the benchmarks.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from psycopg.types.json import Jsonb

from evidence_lib.pg.db import Conn
from evidence_lib.workers.connections import ConnectionSource, ReconnectPolicy
from evidence_lib.workers.timing import CallTimes, maybe_timed

BATCH = 10  # messages per read, and handlers in flight (the edge worker's maxConcurrent)
MAX_POLL_SECONDS = 2
POLL_INTERVAL_MS = 100
VISIBILITY = 10  # seconds a read reserves a message before start_tasks


def prepare(conn: Conn, slug: str) -> None:
    """The anchor's A -> B flow (max attempts 1, like the v2 envelope)."""
    conn.execute("select pgflow.create_flow(%s, max_attempts => 1)", (slug,))
    conn.execute("select pgflow.add_step(%s, 'A')", (slug,))
    conn.execute("select pgflow.add_step(%s, 'B', array['A'])", (slug,))


_START_TASKS = "select run_id, step_slug, task_index, input from pgflow.start_tasks(%s, %s, %s)"


class AnchorWorker:
    def __init__(self, url: str, slug: str, name: str, times: CallTimes, concurrency: int = BATCH) -> None:
        self.url, self.slug, self.name, self.times = url, slug, name, times
        self.concurrency = concurrency
        self.worker_id = uuid.uuid4()
        self.source = ConnectionSource(url, size=concurrency + 1, policy=ReconnectPolicy(2, 0.05, 1.0),
                                       application_name=name)  # fmt: skip
        self.slots = threading.BoundedSemaphore(concurrency)
        self.executor = ThreadPoolExecutor(concurrency, thread_name_prefix=name)
        self.completed = 0

    def _free(self) -> int:
        taken = 0
        while taken < self.concurrency and self.slots.acquire(blocking=False):
            taken += 1
        for _ in range(taken):
            self.slots.release()
        return taken

    def run(self, stop: Any) -> None:
        with self.source.connection(5) as conn:
            conn.execute("insert into pgflow.workers (worker_id, queue_name, function_name) values (%s, %s, %s)",
                         (self.worker_id, self.slug, self.name))  # fmt: skip
        while not stop.is_set():
            free = self._free()
            if free == 0:
                stop.wait(0.001)  # every handler busy: the edge worker awaits a free slot
                continue
            with self.source.connection(5) as conn:
                with maybe_timed(self.times, "pgmq.read_with_poll"):
                    ids = [r[0] for r in conn.execute(
                        "select msg_id from pgmq.read_with_poll(%s, %s, %s, %s, %s)",
                        (self.slug, VISIBILITY, free, MAX_POLL_SECONDS, POLL_INTERVAL_MS)).fetchall()]  # fmt: skip
                if not ids:
                    continue
                with maybe_timed(self.times, "start_tasks"):
                    tasks = conn.execute(_START_TASKS, (self.slug, ids, self.worker_id)).fetchall()
            for run_id, step_slug, task_index, payload in tasks:
                self.slots.acquire()
                self.executor.submit(self._handle, run_id, step_slug, task_index, payload)
        self.executor.shutdown(wait=True)
        self.source.close()

    def _handle(self, run_id: Any, step_slug: str, task_index: int, payload: Any) -> None:
        try:
            output = payload  # the handler: identity, as this engine's benchmark handlers
            with self.source.connection(5) as conn, maybe_timed(self.times, "complete_task"):
                conn.execute("select count(*) from pgflow.complete_task(%s, %s, %s, %s)",
                             (run_id, step_slug, task_index or 0, Jsonb(output)))  # fmt: skip
            self.completed += 1
        finally:
            self.slots.release()


def worker_loop(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    """A participant process: one anchor worker on flow `opts['slug']`."""
    AnchorWorker(url, opts["slug"], opts["name"], times, opts.get("concurrency", BATCH)).run(stop)


def producer_loop(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    """Start anchor runs, keeping `in_flight` of them started."""
    from evidence_lib.bench.pools import keep_in_flight, paced_start
    from evidence_lib.pg.db import connect

    slug, limit = opts["slug"], opts.get("in_flight", 0)
    with connect(url, application_name="perf_anchor_producer") as conn:
        if "rate" in opts:  # paced: a run every 1/rate s
            paced_start(stop, opts["rate"], lambda: times.call("start_flow", lambda: _start_flow(conn, slug)))
            return
        in_flight = "select count(*) from pgflow.runs where flow_slug = %s and status = 'started'"
        keep_in_flight(conn, stop, limit, in_flight, "select run_id from pgflow.start_flow(%s, '{}'::jsonb)", (slug,),
                       times.batch)  # fmt: skip


def _start_flow(conn: Conn, slug: str) -> None:
    conn.execute("select run_id from pgflow.start_flow(%s, '{}'::jsonb)", (slug,))
