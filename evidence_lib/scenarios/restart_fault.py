"""The server-restart fault: the whole PostgreSQL server crashes while work is in flight.

v2 workers (separate connection sources each) and a reconciler driver work through A -> B runs
whose handlers take a while and record every execution outside the engine (a Python list: it
survives the crash). Meanwhile the server is crashed (`pg_ctl stop -m immediate`, then SIGKILL
to the postmaster, alternating) and restarted after an outage shorter than the leases. An
operator loop runs the controlled takeover for claims past their horizon, as a deployment
would. Everything is read back afterwards: every run terminal, one settlement per task, the
queues consistent, each handler run once except where a takeover revoked its claim (each such
re-run listed), no settlement given up while its lease had time left, and how long after the
server's return each worker and the reconciler were working again.

Only a server this suite owns can be crashed; on another one the fault is skipped and the
report says why.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from evidence_lib.engine import v2
from evidence_lib.engine.flows import Flow, QueueMode, compile_flow, route, with_step_queues
from evidence_lib.engine.jsontypes import Json
from evidence_lib.pg.control import Crash, ServerControl
from evidence_lib.pg.db import connect, one, rows
from evidence_lib.scenarios.support.readback import message_facts, timeline
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.takeover import take_over_expired
from evidence_lib.workers.v2 import V2Worker

RESUME_TARGET = 2.0  # seconds after the server's return (a measurement with a target)
RESUME_BOUND = 3.0  # seconds: the target plus slack for a loaded machine (the gate)
SETTLE_AFTER_RETURN = 2.0  # seconds between a server's return and the next crash
RECONNECT_BOUND = 2.0  # seconds: the reconnect cap (1 s) plus a connect's own time


@dataclass
class RestartResult:
    mode: QueueMode
    runs: int
    crashes: list[dict[str, Any]] = field(default_factory=list)  # kind, crashed_at, back_at, outage_s
    executions: Counter[tuple[str, str]] = field(default_factory=Counter)  # (run id, step) -> runs
    facts: dict[str, Any] = field(default_factory=dict)
    resumes: list[dict[str, Any]] = field(default_factory=list)  # participant, outage, seconds after return
    takeovers: list[dict[str, object]] = field(default_factory=list)
    run_ids: dict[str, str] = field(default_factory=dict)  # run uuid -> the run input's id
    gave_up_with_time_left: list[str] = field(default_factory=list)
    longest_reconnect_wait: float = 0.0  # seconds between two connect attempts while the server was away
    completions: list[tuple[float, float]] = field(default_factory=list)  # (wall time, run ms)
    seconds: float = 0.0

    @property
    def resumed_within(self) -> float:
        """The slowest participant's resume after a server return (seconds; 0 when none)."""
        return max((float(r["seconds_after_return"]) for r in self.resumes), default=0.0)

    @property
    def gates(self) -> dict[str, tuple[bool, str]]:
        f, n = self.facts, self.runs
        taken = {
            (self.run_ids.get(str(t["run_id"]), ""), str(t["step"]))
            for t in self.takeovers
            if t["outcome"] == "taken_over"
        }
        twice = [f"{r}/{s} x{k}" for (r, s), k in self.executions.items() if k != 1 and (r, s) not in taken]
        reruns = [f"{t['run_id']}/{t['step']} (claim {t['expired_claim']})" for t in self.takeovers]
        missing = 2 * n - len(self.executions)
        return {
            "every_run_completed_through_the_crashes": (
                f.get("completed") == n,
                f"{f.get('completed')}/{n} runs completed across {len(self.crashes)} crashes "
                f"({', '.join(c['kind'] for c in self.crashes)})",
            ),
            "one_settlement_per_task": (
                f.get("settlements") == 2 * n and f.get("tasks") == 2 * n,
                f"{f.get('tasks')} tasks, {f.get('settlements')} settlements",
            ),
            "no_duplicate_orphan_or_unarchived_message": (
                f.get("archived") == 2 * n and f.get("left") == 0 and f.get("duplicate_messages") == 0,
                f"archived {f.get('archived')}, left {f.get('left')}, duplicates {f.get('duplicate_messages')}",
            ),
            "each_handler_ran_once_except_after_a_takeover": (
                not twice and missing == 0,
                f"handlers run more than once outside takeovers: {twice[:5] or 'none'}; "
                f"re-run after a takeover: {reruns[:5] or 'none'}",
            ),
            "no_settlement_gave_up_with_lease_left": (
                not self.gave_up_with_time_left,
                f"given up with time left: {self.gave_up_with_time_left[:5] or 'none'}",
            ),
            "reconnect_waits_capped": (
                self.longest_reconnect_wait <= RECONNECT_BOUND,
                f"longest wait between two connect attempts while the server was away: "
                f"{self.longest_reconnect_wait:.2f} s (the policy's cap is 1 s; bound {RECONNECT_BOUND:.0f} s)",
            ),
            "workers_and_reconciler_resumed_on_their_own": (
                bool(self.resumes) and self.resumed_within <= RESUME_BOUND,
                f"slowest resume {self.resumed_within:.2f} s after the server's return "
                f"(target {RESUME_TARGET:.0f} s: {'met' if self.resumed_within <= RESUME_TARGET else 'missed'}; "
                f"{len(self.resumes)} resumes)",
            ),
        }


def _flow(mode: QueueMode, handler_s: float, timeout: int, executions: Counter[tuple[str, str]]) -> Any:
    lock = threading.Lock()

    def handler(step: str) -> Any:
        def run(payload: Json) -> Json:
            assert isinstance(payload, dict)
            run_input = payload.get("run", payload)
            assert isinstance(run_input, dict)
            with lock:  # recorded outside the engine: survives the crash
                executions[(str(run_input["id"]), step)] += 1
            time.sleep(handler_s)  # the handler's work
            return {"step": step}

        return run

    flow: Flow[Any] = Flow("restart", max_attempts=1, timeout=timeout)
    flow.add("A", handler("A")).add("B", handler("B"), deps=["A"])
    return with_step_queues(flow) if mode == "step" else flow


def run_restart(
    url: str,
    control: ServerControl,
    mode: QueueMode = "flow",
    *,
    runs: int = 40,
    workers: int = 2,
    crashes: tuple[Crash, ...] = ("immediate", "kill9"),
    outage: float = 3.0,
    handler_s: float = 0.4,
    timeout: int = 5,
    deadline: float = 90.0,
) -> RestartResult:
    """Crash and restart the server under work; see the module docstring."""
    result = RestartResult(mode, runs)
    flow = _flow(mode, handler_s, timeout, result.executions)
    with connect(url, application_name="restart") as conn:
        compile_flow(conn, flow)
        for i in range(runs):
            v2.start_run(conn, "restart", {"id": i})
    steps: list[str | None] = [None] if mode == "flow" else ["A", "B"]
    pool = [
        V2Worker.serving(
            url,
            flow,
            steps[i % len(steps)],
            name=f"restart_worker_{i}",
            config=WorkerConfig(concurrency=4, poll_interval=0.02, visibility_timeout=5),
        )
        for i in range(max(workers, len(steps)))
    ]
    driver = Reconciler(url, poll_interval=0.02, name="restart_reconciler")
    stop = threading.Event()
    threads = [threading.Thread(target=w.__enter__().run, kwargs={"handle_signals": False}) for w in pool]
    threads += [threading.Thread(target=driver.run), threading.Thread(target=_operator, args=(url, flow, stop, result))]
    started = time.perf_counter()
    for t in threads:
        t.start()
    try:
        for kind in crashes:
            if result.crashes:  # the participants are back and working before the next crash
                stop.wait(max(0.0, result.crashes[-1]["back_at"] + SETTLE_AFTER_RETURN - time.time()))
            _wait_for_progress(url, stop, deadline)  # work is in flight: some runs done, others not
            crashed = control.crash(kind)
            time.sleep(outage)  # the outage: the server is really down this long
            back = control.start(url)
            result.crashes.append({"kind": kind, "crashed_at": crashed, "back_at": back, "outage_s": back - crashed})
        _wait_until_done(url, runs, deadline)
    finally:
        result.seconds = time.perf_counter() - started
        stop.set()
        for w in pool:
            w.request_shutdown()
        driver.stop()
        for t in threads:
            t.join(30)
    _read_back(result, url, flow, pool, driver)
    return result


def _wait_for_progress(url: str, stop: threading.Event, deadline: float, settlements: int = 6) -> None:
    """Return once `settlements` were made since the last look (work in flight) or every run is
    terminal (a crash then hits idle workers), within `deadline`."""
    limit = time.monotonic() + deadline
    with connect(url, application_name="restart_watch") as conn:
        base = int(one(conn, "select count(*) from engine.task_settlements"))
        while int(one(conn, "select count(*) from engine.task_settlements")) < base + settlements:
            if not int(one(conn, "select count(*) from engine.runs where status = 'started'")):
                return
            if time.monotonic() > limit:
                raise TimeoutError(f"no settlement within {deadline:.0f} s: the work did not start")
            stop.wait(0.05)  # progress poll


def _wait_until_done(url: str, runs: int, deadline: float) -> None:
    limit = time.monotonic() + deadline
    while time.monotonic() < limit:
        try:
            with connect(url, application_name="restart_watch") as conn:
                if int(one(conn, "select count(*) from engine.runs where status in ('completed', 'failed')")) >= runs:
                    return
        except Exception:  # the server is recovering: look again
            pass
        time.sleep(0.1)  # progress poll
    raise TimeoutError(f"the {runs} runs were not all terminal within {deadline:.0f} s")


def _operator(url: str, flow: Any, stop: threading.Event, result: RestartResult) -> None:
    """The deployment's operator loop: a controlled takeover of every claim past its horizon."""
    while not stop.is_set():
        try:
            report = take_over_expired(url, flows={"restart": flow})
            result.takeovers += [o.row() for o in report.outcomes]
        except Exception:  # the server is away: try again on the next round
            pass
        stop.wait(0.5)  # the operator's round


def _read_back(result: RestartResult, url: str, flow: Any, pool: list[V2Worker], driver: Reconciler) -> None:
    with connect(url, application_name="restart") as conn:
        result.facts = rows(
            conn,
            "select (select count(*) from engine.runs where status = 'completed') as completed, "
            "(select count(*) from engine.step_tasks) as tasks, "
            "(select count(*) from engine.task_settlements) as settlements",
        )[0] | message_facts(conn, sorted({route(flow, "A"), route(flow, "B")}))
        result.run_ids = {str(r[0]): str(r[1]) for r in conn.execute("select run_id, input->>'id' from engine.runs")}
        result.completions, _ = timeline(conn)
    for worker in pool:
        for s in worker.stats.settlements:
            if s.final == "gave_up":
                left = (s.lease_expires_at.timestamp() - s.attempts[-1].started_at) if s.attempts else 0.0
                if left > 0:
                    result.gave_up_with_time_left.append(f"claim {s.claim_id} ({left:.1f} s left)")
    outages = [(w.name, w.outages) for w in pool] + [(driver.name, driver.source.outages)]
    ends = [c["crashed_at"] for c in result.crashes[1:]] + [float("inf")]
    for crash, end in zip(result.crashes, ends, strict=True):
        for name, seen in outages:
            backs = [t for t, kind, _ in seen.events if kind == "back" and crash["crashed_at"] <= t < end]
            if backs:
                after, note = max(0.0, backs[0] - crash["back_at"]), ""
            elif end != float("inf"):  # still away when the next crash came: not resumed in time
                after, note = end - crash["back_at"], "not back before the next crash"
            else:
                continue
            result.resumes.append(
                {"participant": name, "crash": crash["kind"], "seconds_after_return": after, "note": note}
            )
    for _, seen in outages:  # the gaps between connect attempts from going away to being back
        away = [t for t, kind, _ in seen.events if kind == "away"]
        for start in away:
            back = min((t for t, kind, _ in seen.events if kind == "back" and t >= start), default=float("inf"))
            tried = [t for t in seen.connects if start <= t <= back]
            gaps = [b - a for a, b in itertools.pairwise(tried)]
            result.longest_reconnect_wait = max([result.longest_reconnect_wait, *gaps])
