"""Scenario 2, response-loss replay: the settlement commits but the client never gets the reply
(a loopback proxy drops the server's answer to COMMIT and closes the client's socket). The
server truth is read with `pg_xact_status`; the worker resubmits the same settlement and gets
`replayed`; the handler ran once (a side-effect table counts it); a conflicting resubmission
gets `conflict` and writes nothing.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from evidence_lib.engine import v2
from evidence_lib.engine.flows import Flow, QueueMode, compile_flow, with_step_queues
from evidence_lib.engine.jsontypes import Json
from evidence_lib.harness.ab_flow import step_of
from evidence_lib.harness.faults import LostAckProxy, proxy_summary, xact_status
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.pg import db
from evidence_lib.pg.control import Crash
from evidence_lib.pg.db import connect, one
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.restart_fault import run_restart
from evidence_lib.scenarios.support import consistency
from evidence_lib.scenarios.support.parts import Databases, PartSpec, candidate_databases, run_parts, single_database
from evidence_lib.scenarios.support.setup import modes, scenario_server, timed
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.v2 import V2Worker

SCENARIO = "02_response_loss"


def run(queue_modes: str = "flow,step", repeat: int = 3, database_url: str = "", hooks: str = "") -> ScenarioResult:
    result = ScenarioResult(
        SCENARIO, "Response-loss replay", {"queue_modes": queue_modes, "repeat": repeat, "hooks": hooks}
    )
    with (
        result.capture_logs(),
        scenario_server(database_url) as server,
        candidate_databases(server, hooks=hooks) as databases,
    ):
        run_parts(result, parts(repeat), databases, modes(queue_modes))
    consistency.gates(result)
    result.timing_chart("phases", "Response-loss replay: every settlement (ms)")
    return result


def parts(repeat: int = 3, crashes: tuple[Crash, ...] = ("immediate", "kill9")) -> list[PartSpec]:
    """The scenario's parts; `repeat` lost acknowledgements per queue mode; the server crashes
    `crashes` times under work (the negative controls use one crash, which is enough to tell)."""
    return [
        PartSpec("replay", single_database(partial(_prove, repeat=repeat))),
        PartSpec("server_restart", partial(server_restart, crashes=crashes)),
    ]


def server_restart(
    result: ScenarioResult, databases: Databases, mode: QueueMode, crashes: tuple[Crash, ...] = ("immediate", "kill9")
) -> None:
    """The whole server crashes twice (immediate, then SIGKILL to the postmaster) under work and
    comes back; gates from `restart_fault`. Skipped, and said, on a server this suite does not own."""
    control = databases.server.control
    if control is None:
        result.notes.append(
            f"server restart fault skipped in {mode} mode: the server was given by DATABASE_URL and is "
            "not this suite's to crash"
        )
        return
    with databases() as url:
        with connect(url) as conn:  # a crash must not lose an acknowledged commit
            conn.execute(f"alter database {db.database_name(url)} set synchronous_commit = on")
        with timed(result, f"{len(crashes)} crash(es) and restart(s) under work", mode=mode):
            outcome = run_restart(url, control, mode, crashes=crashes)
        with connect(url) as conn:
            consistency.check(result, conn, mode, "after two server crashes")
    result.append_rows("server_restarts", [c | {"mode": mode} for c in outcome.crashes])
    result.append_rows("resumes", [r | {"mode": mode} for r in outcome.resumes])
    if outcome.takeovers:
        result.append_rows("takeovers", [t | {"mode": mode} for t in outcome.takeovers])
    for name, (passed, detail) in outcome.gates.items():
        result.gate(f"restart_{name}", passed, detail, mode)


def _flow(url: str, mode: QueueMode) -> Any:
    def effect(step: str, payload: Json) -> Json:
        with connect(url, application_name="handler") as c:  # not through the proxy
            c.execute(
                "insert into evidence_effects (run_id, step) values (%s, %s)",
                (payload.get("run_id") if isinstance(payload, dict) else None, step),
            )
        return {"step": step}

    flow: Flow[Any] = Flow("loss", max_attempts=1)
    flow.add("A", lambda p: effect("A", p)).add("B", lambda p: effect("B", p), deps=["A"])
    return with_step_queues(flow) if mode == "step" else flow


def _prove(result: ScenarioResult, url: str, mode: QueueMode, repeat: int) -> None:
    rows: list[dict[str, Any]] = []
    with connect(url, application_name="response_loss") as conn:
        conn.execute("create table evidence_effects (id serial primary key, run_id text, step text not null)")
        flow = _flow(url, mode)
        compile_flow(conn, flow)
        for attempt in range(1, repeat + 1):
            run_id = v2.start_run(conn, "loss", {"run_id": f"attempt-{attempt}"})
            with LostAckProxy(url) as proxy:
                proxy.arm()
                with (
                    V2Worker(proxy.url, flow, step_of(flow, "A"), name="loss_worker") as worker,
                    timed(result, f"read, claim, handler, settle A #{attempt}", mode=mode),
                ):
                    worker.poll(wait_for_handlers=True)
                events = proxy_summary(proxy)
            [record] = worker.stats.settlements
            first, last = record.attempts[0], record.attempts[-1]
            before = snapshot(conn)
            conflict = v2.settle(conn, record.claim_id, "completed", {"step": "A", "different": True})
            changed = diff(before, snapshot(conn))
            rows.append(
                {
                    "mode": mode,
                    "repeat": attempt,
                    "run_id": str(run_id),
                    "proxy": " -> ".join(e["event"] for e in events),
                    "attempt_1": first.result,
                    "client_view": "indeterminate" if first.indeterminate else first.result,
                    "xid": first.xid,
                    "pg_xact_status": xact_status(conn, str(first.xid)),
                    "resubmission": last.verdict,
                    "attempts": len(record.attempts),
                    # the ones that reached a connection: a reconnect try the proxy refused under load
                    # (unreachable) is an attempt of the client's, not a submission
                    "submitted": sum(1 for a in record.attempts if a.submitted),
                    "handler_runs": one(
                        conn,
                        "select count(*) from evidence_effects where run_id = %s and step = 'A'",
                        (f"attempt-{attempt}",),
                    ),
                    "settlements": one(
                        conn,
                        "select count(*) from engine.task_settlements where claim_id = %s",
                        (record.claim_id,),
                    ),
                    "conflicting_resubmission": conflict.verdict,
                    "rows_changed_by_conflict": sum(len(d.added) + len(d.removed) for d in changed.values()),
                }
            )
            consistency.check(result, conn, mode, f"lost ack #{attempt} replayed")
        with V2Worker(url, flow, step_of(flow, "B"), name="loss_worker_b") as worker_b:
            for _ in range(repeat + 2):
                Reconciler(url).drain()
                worker_b.poll(wait_for_handlers=True)
            Reconciler(url).drain()
        completed = one(conn, "select count(*) from engine.runs where status = 'completed'")
        consistency.check(result, conn, mode, "every run reconciled")
    result.append_rows("replays", rows)
    ok = [r for r in rows if r["client_view"] == "indeterminate" and r["pg_xact_status"] == "committed"]
    result.gate(
        "every_lost_ack_was_indeterminate_and_committed",
        len(ok) == repeat,
        f"{len(ok)}/{repeat} commits lost their reply and were committed per pg_xact_status",
        mode,
    )
    replayed = [r for r in rows if r["resubmission"] == "replayed" and r["submitted"] == 2]
    result.gate("every_resubmission_was_replayed", len(replayed) == repeat, f"{len(replayed)}/{repeat}", mode)
    once = [r for r in rows if r["handler_runs"] == 1 and r["settlements"] == 1]
    result.gate("every_handler_ran_once", len(once) == repeat, f"{len(once)}/{repeat} ran once, one settlement", mode)
    clean = [r for r in rows if r["conflicting_resubmission"] == "conflict" and r["rows_changed_by_conflict"] == 0]
    result.gate("conflicting_resubmissions_wrote_nothing", len(clean) == repeat, f"{len(clean)}/{repeat}", mode)
    result.gate("every_run_completed", completed == repeat, f"{completed}/{repeat} runs completed", mode)
