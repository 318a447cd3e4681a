"""Run the moderation pipeline end to end: `python -m examples.moderation [--mode flow|step|both]`.

Starts a throwaway PostgreSQL (or uses DATABASE_URL), installs the engine and the application's
schema, submits a review per thread, runs one worker pool per step (step queues) or one pool for
the flow (plain), keeps a maintenance loop calling requeue_stalled_tasks, and prints the outcome.
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass
from typing import Any

from evidence_lib.engine import v1
from evidence_lib.engine.flows import compile_flow
from evidence_lib.pg import db, migrate, servers
from evidence_lib.pg.db import connect
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.v1 import Worker
from examples.moderation import domain, pipeline

POOLS = {"fetch": 3, "classify": 1, "verdict": 1}  # per-step concurrency in step-queue mode


@dataclass
class Outcome:
    mode: str
    reviews: int
    seconds: float
    summary: dict[str, Any]
    runs_completed: int


def run_pipeline(
    url: str,
    mode: str,
    *,
    threads: int = 50,
    behaviour: pipeline.Behaviour | None = None,
    pools: dict[str, int] | None = None,
    timeout: float = 120.0,
) -> Outcome:
    """Submit one review per thread and drive them to a decision in `mode` ('flow' or 'step')."""
    pools = pools or POOLS
    with connect(url, application_name="moderation_app") as conn:
        domain.install(conn)
        ids = domain.seed_threads(conn, threads)
        flow = pipeline.staged(url, behaviour) if mode == "step" else pipeline.build(url, behaviour)
        compile_flow(conn, flow)
        started = time.perf_counter()
        for thread_id in ids:
            domain.submit_review(conn, flow.slug, thread_id)
        if mode == "step":
            workers = [
                Worker.serving(
                    url,
                    flow,
                    step,
                    config=WorkerConfig(concurrency=n, poll_interval=0.01),
                    name=f"moderation_{step}",
                )
                for step, n in pools.items()
            ]
        else:
            workers = [
                Worker.serving(
                    url,
                    flow,
                    config=WorkerConfig(concurrency=sum(pools.values()), poll_interval=0.01),
                    name="moderation",
                )
            ]
        stop = threading.Event()
        threads_ = [threading.Thread(target=w.__enter__().run, kwargs={"handle_signals": False}) for w in workers]
        maintenance = threading.Thread(target=_maintain, args=(url, stop))
        for t in [*threads_, maintenance]:
            t.start()
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                row = conn.execute(
                    "select count(*) from engine.runs where flow_slug = %s and status = 'started'",
                    (flow.slug,),
                ).fetchone()
                if row is not None and row[0] == 0:
                    break
                stop.wait(0.05)  # progress poll
        finally:
            for w in workers:
                w.request_shutdown()
            stop.set()
            for t in [*threads_, maintenance]:
                t.join(30)
        seconds = time.perf_counter() - started
        done = conn.execute(
            "select count(*) from engine.runs where flow_slug = %s and status = 'completed'", (flow.slug,)
        ).fetchone()
        return Outcome(mode, threads, seconds, domain.summary(conn), int(done[0]) if done else 0)


def _maintain(url: str, stop: threading.Event, every: float = 0.5) -> None:
    """The application's own maintenance loop: the engine has no scheduler of its own."""
    with connect(url, application_name="moderation_maintenance") as conn:
        while not stop.wait(every):
            v1.requeue_stalled_tasks(conn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.moderation")
    parser.add_argument("--mode", choices=["flow", "step", "both"], default="both")
    parser.add_argument("--threads", type=int, default=60, help="threads to review")
    parser.add_argument("--fetch-ms", type=float, default=50.0, help="latency of the (simulated) forum API")
    args = parser.parse_args(argv)
    ok = True
    with servers.open_server() as server:
        for mode in ["flow", "step"] if args.mode == "both" else [args.mode]:
            with db.scratch_database(server, prefix="moderation") as url:
                migrate.apply_migrations(url)
                out = run_pipeline(
                    url,
                    mode,
                    threads=args.threads,
                    behaviour=pipeline.Behaviour(fetch_seconds=args.fetch_ms / 1000),
                )
                label = (
                    "plain flow (one queue, one pool of 5)"
                    if mode == "flow"
                    else "private step queues (fetch 3, classify 1, verdict 1)"
                )
                print(
                    f"{label}: {out.runs_completed}/{out.reviews} reviews decided in {out.seconds:.2f} s; {out.summary}"
                )
                ok = ok and out.runs_completed == out.reviews
    return 0 if ok else 1
