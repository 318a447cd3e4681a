"""The participants of a throughput case, each in its own process (as deployed: producers,
workers and reconcilers are separate processes, each with its own interpreter and GIL).

`run_case` starts them, waits until all are connected, lets the caller measure a window, then
stops them and collects their per-call timings and CPU time.

They are forked from a fork server (`multiprocessing`'s "forkserver": one clean process, started
once, that has already imported the worker code), not spawned: spawning nine interpreters that
each import psycopg and the workers took about 2 s of both cores per case before its warm-up,
forking them from the server about 0.1 s. Each is still a process of its own with no state
shared with the caller (the server never ran a case: no connection or thread crosses a fork).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil

from evidence_lib.workers.timing import CallTimes

Spec = tuple[str, dict[str, Any]]  # (kind, options)


def _raw_loop(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    from evidence_lib.pg.db import connect

    queue = opts["queue"]
    with connect(url, application_name="perf_raw") as conn:
        while not stop.is_set():
            with times.time("pgmq.send"):
                conn.execute("select pgmq.send(%s, '{}')", (queue,))
            with times.time("pgmq.read"):
                rows = conn.execute("select msg_id from pgmq.read(%s, 30, 1)", (queue,)).fetchall()
            for (mid,) in rows:
                with times.time("pgmq.archive"):
                    conn.execute("select pgmq.archive(%s, %s::bigint)", (queue, mid))


def _plain(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    from evidence_lib.bench.plain import unit_loop

    unit_loop(url, opts, stop, times)


def _producer(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    from evidence_lib.bench.pools import keep_in_flight, paced_start
    from evidence_lib.engine import v1, v2
    from evidence_lib.pg.db import connect

    slug, limit = opts["slug"], opts.get("in_flight", 0)
    start = v2.start_run if opts["protocol"] == "v2" else v1.start_flow
    name = "v2_start_run" if opts["protocol"] == "v2" else "start_flow"
    with connect(url, application_name="perf_producer") as conn:
        if "rate" in opts:  # paced: a run every 1/rate s, however many are in flight
            paced_start(stop, opts["rate"], lambda: times.call(name, lambda: start(conn, slug, {"n": 1})))
            return
        function = "engine.v2_start_run" if opts["protocol"] == "v2" else "engine.start_flow"
        in_flight = "select count(*) from engine.runs where flow_slug = %s and status = 'started'"
        keep_in_flight(conn, stop, limit, in_flight, f"select {function}(%s, '{{\"n\": 1}}'::jsonb)", (slug,),
                       times.batch)  # fmt: skip


def _worker(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    from evidence_lib.harness.ab_flow import ab_flow
    from evidence_lib.workers.config import WorkerConfig
    from evidence_lib.workers.v1 import Worker
    from evidence_lib.workers.v2 import V2Worker

    flow = ab_flow(opts["slug"], opts["mode"])
    cls = V2Worker if opts["protocol"] == "v2" else Worker
    config = WorkerConfig(concurrency=opts.get("concurrency", 10), poll_interval=opts.get("poll_interval", 0.005),
                          visibility_timeout=5, wakeups=opts.get("wakeups", True),
                          reconcile_url=url if opts.get("followup") else "")  # fmt: skip
    worker = cls.serving(url, flow, opts.get("step"), name=opts["name"], config=config)
    with worker:
        worker.timings = times
        _on_stop(stop, worker.request_shutdown)
        worker.run(handle_signals=False)


def _reconciler(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    from evidence_lib.workers.reconciler import Reconciler

    driver = Reconciler(url, poll_interval=opts.get("poll_interval", 0.01), name=opts["name"],
                        wakeups=opts.get("wakeups", True))  # fmt: skip
    driver.timings = times
    _on_stop(stop, driver.stop)
    driver.run()


def _on_stop(stop: Any, action: Callable[[], None]) -> None:
    def watch() -> None:
        stop.wait()
        action()

    threading.Thread(target=watch, daemon=True).start()


def _anchor_worker(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    from evidence_lib.bench.anchor_pool import worker_loop

    worker_loop(url, opts, stop, times)


def _anchor_producer(url: str, opts: dict[str, Any], stop: Any, times: CallTimes) -> None:
    from evidence_lib.bench.anchor_pool import producer_loop

    producer_loop(url, opts, stop, times)


KINDS: dict[str, Callable[[str, dict[str, Any], Any, CallTimes], None]] = {
    "raw": _raw_loop,
    "plain": _plain,
    "producer": _producer,
    "worker": _worker,
    "reconciler": _reconciler,
    "anchor_worker": _anchor_worker,
    "anchor_producer": _anchor_producer,
}


def _main(kind: str, url: str, opts: dict[str, Any], stop: Any, reset: Any, freeze: Any, ready: Any, out: Any,
          up: Any) -> None:  # fmt: skip
    times = CallTimes()
    frozen: list[dict[str, list[float]]] = []  # the window's calls, once the window closed
    threading.Thread(target=_resetter, args=(reset, freeze, times, frozen), daemon=True).start()
    ready.wait()
    _warm(kind)
    up.put(kind)  # imported and about to connect: the window may start after the warm-up
    try:
        KINDS[kind](url, opts, stop, times)
        out.put((kind, frozen[0] if frozen else dict(times.samples), None))
    except BaseException as exc:
        out.put((kind, frozen[0] if frozen else dict(times.samples), f"{type(exc).__name__}: {exc}"))


def _warm(kind: str) -> None:
    """Import what the participant needs before reporting that it is up."""
    from evidence_lib.harness import ab_flow  # noqa: F401
    from evidence_lib.workers import reconciler, v1, v2  # noqa: F401


def _resetter(reset: Any, freeze: Any, times: CallTimes, frozen: list[dict[str, list[float]]]) -> None:
    reset.wait()
    times.samples.clear()  # the measuring window starts now
    freeze.wait()  # the window closed: what is called after it (the shutdown) is not the window's
    frozen.append({name: list(values) for name, values in list(times.samples.items())})


@dataclass
class CaseHandle:
    reset: Any  # set: the window opens (every participant forgets the calls before it)
    freeze: Any  # set: the window closes (the calls after it are not reported)
    processes: list[Any]

    def cpu_seconds(self) -> float:
        total = 0.0
        for p in self.processes:
            try:
                t = psutil.Process(p.pid).cpu_times()
                total += float(t.user + t.system)
            except psutil.Error:
                continue
        return total


# what the fork server imports once, so a participant forked from it starts with the code it runs
PRELOAD = [
    "evidence_lib.bench.anchor_pool",
    "evidence_lib.bench.participants",
    "evidence_lib.bench.plain",
    "evidence_lib.bench.pools",
    "evidence_lib.harness.ab_flow",
    "evidence_lib.workers.reconciler",
    "evidence_lib.workers.v1",
    "evidence_lib.workers.v2",
]


def _context() -> Any:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


@contextmanager
def run_case(url: str, specs: list[Spec]) -> Iterator[tuple[CaseHandle, Callable[[], tuple[CallTimes, list[str]]]]]:
    """Start one process per spec; yield a handle (open the window with `handle.reset.set()`,
    close it with `handle.freeze.set()`: the calls reported are those between the two, or up to
    the end when it is never closed) and a `finish` that stops them and returns their merged
    timings and errors."""
    ctx = _context()
    stop, reset, freeze, ready = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Event()
    out, up = ctx.Queue(), ctx.Queue()
    processes = [
        ctx.Process(target=_main, args=(kind, url, opts, stop, reset, freeze, ready, out, up), daemon=True)
        for kind, opts in specs
    ]
    for p in processes:
        p.start()
    ready.set()
    for _ in processes:  # every participant is up before the caller's warm-up begins
        up.get(timeout=120)
    collected: list[tuple[str, dict[str, list[float]], str | None]] = []

    def finish() -> tuple[CallTimes, list[str]]:
        stop.set()
        deadline = time.monotonic() + 60
        while len(collected) < len(processes) and time.monotonic() < deadline:
            try:
                collected.append(out.get(timeout=1))
            except Exception:
                if not any(p.is_alive() for p in processes):
                    break
        for p in processes:
            p.join(10)
        merged = CallTimes()
        for _, samples, _ in collected:
            for name, values in samples.items():
                merged.samples[name].extend(values)
        return merged, [f"{k}: {e}" for k, _, e in collected if e]

    try:
        yield CaseHandle(reset, freeze, processes), finish
    finally:
        stop.set()
        for p in processes:
            if p.is_alive():
                p.terminate()
