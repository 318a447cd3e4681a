"""Protocol stress: N worker sessions and M reconciler sessions drive K v2 runs to the end.

Workers read one message at a time, claim it for its one task and settle what they won;
reconcilers reconcile dirty runs. Everything is then read back: every run terminal, no task,
message, claim or settlement duplicated, and `pg_stat_database.deadlocks` unchanged.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from evidence_lib.engine import v1, v2
from evidence_lib.engine.flows import QueueMode, route
from evidence_lib.engine.messages import UnsupportedMessage, parse_task_message
from evidence_lib.harness.ab_flow import define_ab
from evidence_lib.harness.locks import LivenessTimeout
from evidence_lib.pg.db import connect, one, rows
from evidence_lib.scenarios.support.readback import deadlock_count, message_facts

JOIN_DEADLINE = 30.0  # seconds a stopped thread may take to finish its last call
PROGRESS_POLL = 0.05  # seconds between two progress reads (liveness only)


@dataclass
class StressResult:
    mode: QueueMode
    runs: int
    workers: int
    reconcilers: int
    seconds: float = 0.0
    deadlocks_before: int = 0
    deadlocks_after: int = 0
    facts: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    @property
    def gates(self) -> dict[str, bool]:
        f = self.facts
        n = self.runs
        return {
            "every_run_terminal": f.get("not_terminal") == 0,
            "every_run_completed": f.get("completed") == n,
            "one_task_per_step": f.get("tasks") == 2 * n and f.get("duplicate_tasks") == 0,
            "one_message_per_task": f.get("archived") == 2 * n
            and f.get("left") == 0
            and f.get("duplicate_messages") == 0,
            "one_settlement_per_task": f.get("settlements") == 2 * n and f.get("claims") == 2 * n,
            "work_caught_up": f.get("dirty") == 0,
            "no_deadlock": self.deadlocks_after == self.deadlocks_before,
            "no_session_error": not self.errors,
        }

    @property
    def passed(self) -> bool:
        return all(self.gates.values())


def _worker(url: str, queues: list[str], stop: threading.Event, errors: list[str], name: str) -> None:
    with connect(url, application_name=name) as conn:
        while not stop.is_set():
            idle = True
            for queue in queues:
                for msg in v1.read_messages(conn, queue, 5, 1):
                    idle = False
                    try:
                        task = parse_task_message(msg.message)
                        grant = v2.claim(conn, task.run_id, task.step_slug, queue, msg.msg_id)
                        if grant is not None:
                            v2.settle(conn, grant.claim_id, "completed", {"step": grant.step_slug, "by": name})
                    except (UnsupportedMessage, psycopg.Error) as exc:
                        errors.append(f"{name}: {exc}")
            if idle:
                stop.wait(0.005)


def _reconciler(url: str, stop: threading.Event, errors: list[str], name: str) -> None:
    with connect(url, application_name=name) as conn:
        while not stop.is_set():
            dirty = conn.execute(
                "select run_id from engine.run_work where requested_generation > processed_generation "
                "order by run_id limit 32"
            ).fetchall()
            for (run_id,) in dirty:
                try:
                    v2.reconcile(conn, run_id)
                except psycopg.Error as exc:
                    errors.append(f"{name}: {exc}")
            if not dirty:
                stop.wait(0.005)


FACTS = """
select
  (select count(*) from engine.runs where status not in ('completed', 'failed')) as not_terminal,
  (select count(*) from engine.runs where status = 'completed') as completed,
  (select count(*) from engine.step_tasks) as tasks,
  (select count(*) - count(distinct (run_id, step_slug)) from engine.step_tasks) as duplicate_tasks,
  (select count(*) from engine.task_settlements) as settlements,
  (select count(*) from engine.task_claims) as claims,
  (select count(*) from engine.run_work where requested_generation > processed_generation) as dirty
"""


def run_stress(
    url: str,
    mode: QueueMode = "flow",
    *,
    runs: int = 200,
    workers: int = 4,
    reconcilers: int = 2,
    timeout: float = 180.0,
) -> StressResult:
    """Start `runs` v2 runs on a fresh database at `url`, drive them, read the outcome back."""
    result = StressResult(mode, runs, workers, reconcilers)
    with connect(url, application_name="stress_setup") as conn:
        flow = define_ab(conn, "stress", mode)
        with conn.transaction():
            for i in range(runs):
                v2.start_run(conn, "stress", {"i": i})
    queues = sorted({route(flow, "A"), route(flow, "B")})
    result.deadlocks_before = deadlock_count(url)
    stop = threading.Event()
    threads = [
        threading.Thread(target=_worker, args=(url, queues, stop, result.errors, f"worker_{i}")) for i in range(workers)
    ]
    threads += [
        threading.Thread(target=_reconciler, args=(url, stop, result.errors, f"reconciler_{i}"))
        for i in range(reconcilers)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    try:
        with connect(url, application_name="stress_watch") as watch:
            deadline = time.monotonic() + timeout
            while one(watch, "select count(*) from engine.runs where status = 'started'") != 0:
                if time.monotonic() > deadline:
                    raise LivenessTimeout(f"stress[{mode}]: runs still started after {timeout}s")
                time.sleep(PROGRESS_POLL)
    finally:
        stop.set()
        for t in threads:
            t.join(JOIN_DEADLINE)
        stuck = [t.name for t in threads if t.is_alive()]
        if stuck:
            raise LivenessTimeout(f"stress[{mode}]: threads {', '.join(stuck)} run {JOIN_DEADLINE:.0f} s after stop")
    result.seconds = time.perf_counter() - started
    result.deadlocks_after = deadlock_count(url)
    with connect(url) as conn:
        result.facts = rows(conn, FACTS)[0] | message_facts(conn, queues)
    return result
