"""Scenario 1, the A -> B proof: start, claim A, settle A with no reconciler running, lose the
acknowledgement and replay the same settlement, reconcile in later separately committed calls,
B created and queued exactly once in its stored queue, settle B, reconcile finalizes the run.
"""

from __future__ import annotations

import json
import time
from typing import Any
from uuid import UUID

from evidence_lib.engine import v2
from evidence_lib.engine.flows import AnyFlow, Flow, QueueMode, compile_flow, route, with_step_queues
from evidence_lib.engine.jsontypes import Json
from evidence_lib.harness.ab_flow import ABSteps, define_ab, read_step_message, step_of
from evidence_lib.harness.faults import LostAckProxy, xact_status
from evidence_lib.harness.waits import bounded
from evidence_lib.pg.db import Conn, connect, one, rows
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.support import consistency
from evidence_lib.scenarios.support.parts import PartSpec, candidate_databases, run_parts, single_database
from evidence_lib.scenarios.support.readback import run_state
from evidence_lib.scenarios.support.setup import modes, scenario_server, timed
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.v2 import V2Worker

SCENARIO = "01_ab_proof"


def _handler(conn: Conn, step: str, payload: Json) -> Json:
    conn.execute("insert into evidence_effects (step) values (%s)", (step,))  # the handler's effect
    return {"step": step, "saw": payload}


def run(queue_modes: str = "flow,step", database_url: str = "", hooks: str = "") -> ScenarioResult:
    result = ScenarioResult(SCENARIO, "A -> B proof", {"queue_modes": queue_modes, "hooks": hooks})
    with (
        result.capture_logs(),
        scenario_server(database_url) as server,
        candidate_databases(server, hooks=hooks) as databases,
    ):
        run_parts(result, PARTS, databases, modes(queue_modes))
    consistency.gates(result)
    result.timing_chart("phases", "A -> B proof: every phase (ms)")
    return result


def _prove(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    states: list[dict[str, Any]] = []
    with connect(url, application_name="ab_proof") as conn:
        conn.execute("create table evidence_effects (id serial primary key, step text not null)")
        flow = define_ab(conn, "proof", mode)

        def snap(step: str) -> dict[str, Any]:
            state = run_state(conn, flow, run_id, step) | {"mode": mode}
            states.append(state)
            consistency.check(result, conn, mode, step)
            return state

        with timed(result, "1 start", mode=mode):
            run_id = v2.start_run(conn, "proof", {"order": 42})
        snap("1 start")
        with timed(result, "2 read + claim A", mode=mode):
            grant = v2.claim(conn, run_id, "A", route(flow, "A"), read_step_message(conn, flow, "A", run_id))
        assert grant is not None, "A was not granted"
        snap("2 claim A")
        with timed(result, "3 handler A", mode=mode):
            output = _handler(conn, "A", grant.input)
        with (
            LostAckProxy(url) as proxy,
            V2Worker.serving(proxy.url, flow, step_of(flow, "A"), name="proof_worker") as worker,
        ):
            proxy.arm()
            with timed(result, "4 settle A (ack lost, same settlement resubmitted)", mode=mode):
                record = worker.settle(grant, "completed", output)
        after_settle = snap("4 settle A: ack lost, replayed; no reconciler yet")
        attempts = [
            {
                "mode": mode,
                "attempt": a.attempt,
                "client_result": a.result,
                "xid": a.xid,
                "client_view": "indeterminate" if a.indeterminate else (a.verdict or a.result),
                "server_truth": xact_status(conn, a.xid) if a.xid else None,
                "error": a.error,
            }
            for a in record.attempts
        ]
        result.append_rows("settlement_attempts", attempts)

        with timed(result, "5 reconcile call 1 (max_actions 1): dispatch B", mode=mode):
            first = v2.reconcile(conn, run_id, 1)
        after_first = snap("5 reconcile #1 (max_actions 1): B dispatched")
        with timed(result, "6 reconcile call 2", mode=mode):
            second = v2.reconcile(conn, run_id)
        after_second = snap("6 reconcile #2: nothing left to do")
        with timed(result, "7 read + claim B", mode=mode):
            grant_b = v2.claim(conn, run_id, "B", route(flow, "B"), read_step_message(conn, flow, "B", run_id))
        assert grant_b is not None, "B was not granted"
        snap("7 claim B")
        with (
            V2Worker.serving(url, flow, step_of(flow, "B"), name="proof_worker_b") as worker_b,
            timed(result, "8 handler + settle B", mode=mode),
        ):
            record_b = worker_b.settle(grant_b, "completed", _handler(conn, "B", grant_b.input))
        snap("8 settle B")
        with timed(result, "9 reconcile call 3", mode=mode):
            v2.reconcile(conn, run_id)
        final = snap("9 reconcile #3: run finalized")
        _gates(
            result,
            conn,
            flow,
            run_id,
            mode,
            after_settle,
            (first, second),
            after_first,
            after_second,
            final,
            attempts,
            record_b.final,
        )
    result.append_rows("rows_after_every_step", states)


def a_committed_alone(state: dict[str, Any]) -> bool:
    """A's settlement committed with no reconciler: A completed and settled once, no B task and
    no B message in B's route (the flow queue in flow mode), the run dirty (1 requested, 0
    processed). (The form before issue 14 looked for B only in a private B queue, so in flow
    mode it read a constant 0.)"""
    return bool(
        state["a_task"] == "completed"
        and state["settlements"] == 1
        and state["b_task"] is None
        and state["b_live"] == 0
        and state["requested"] == 1
        and state["processed"] == 0
    )


def _gates(
    result: ScenarioResult,
    conn: Conn,
    flow: AnyFlow,
    run_id: UUID,
    mode: QueueMode,
    after_settle: dict[str, Any],
    reports: tuple[v2.Report, v2.Report],
    after_first: dict[str, Any],
    after_second: dict[str, Any],
    final: dict[str, Any],
    attempts: list[dict[str, Any]],
    b_final: str,
) -> None:
    result.gate(
        "a_committed_with_no_reconciler",
        a_committed_alone(after_settle),
        f"A {after_settle['a_task']}, B task {after_settle['b_task']}, B messages in B's route "
        f"{after_settle['b_live']}, work {after_settle['requested']}/{after_settle['processed']}",
        mode,
    )
    lost = attempts[0] if attempts else {}
    result.gate(
        "lost_ack_indeterminate_but_committed",
        lost.get("client_view") == "indeterminate" and lost.get("server_truth") == "committed",
        f"client: {lost.get('client_view')}, pg_xact_status: {lost.get('server_truth')}",
        mode,
    )
    replayed = attempts[-1]["client_view"] if attempts else None
    effects = one(conn, "select count(*) from evidence_effects where step = 'A'")
    result.gate(
        "same_settlement_replayed_handler_ran_once",
        replayed == "replayed" and effects == 1 and after_settle["settlements"] == 1,
        f"resubmission: {replayed}; handler A ran {effects}x; settlements {after_settle['settlements']}",
        mode,
    )
    first, second = reports
    result.gate(
        "reconciled_in_separate_commits",
        first.actions == 1
        and first.processed
        and after_first["b_task"] == "queued"
        and after_first["b_message_id"] is not None
        and after_first["b_live"] == 1
        and second.actions == 0
        and after_second["b_message_id"] == after_first["b_message_id"]
        and after_second["requested"] == after_second["processed"] == 1,
        f"call 1 (its own commit): {first.actions} action, B task {after_first['b_task']} with message "
        f"{after_first['b_message_id']}, processed {first.processed}; call 2: {second.actions} actions",
        mode,
    )
    b_tasks = one(conn, "select count(*) from engine.step_tasks where run_id = %s and step_slug = 'B'", (run_id,))
    b_route = one(conn, "select queue_name from engine.steps where flow_slug = 'proof' and step_slug = 'B'")
    b_snapshot = one(conn, "select queue_name from engine.step_tasks where run_id = %s and step_slug = 'B'", (run_id,))
    archived_b = one(
        conn,
        f"select count(*) from pgmq.a_{b_route} where message->>'run_id' = %s and message->>'step_slug' = 'B'",
        (str(run_id),),
    )
    result.gate(
        "b_created_and_queued_once_in_its_stored_queue",
        b_tasks == 1 and archived_b == 1 and b_snapshot == b_route == route(flow, "B"),
        f"B tasks {b_tasks}, B messages {archived_b} in {b_route} (snapshot {b_snapshot})",
        mode,
    )
    output = one(conn, "select output from engine.runs where run_id = %s", (run_id,))
    b_output = one(conn, "select output from engine.step_tasks where run_id = %s and step_slug = 'B'", (run_id,))
    left = sum(v for k, v in final.items() if k in ("queue", "queue_a", "queue_b"))
    result.gate(
        "run_finalized_by_reconciliation",
        final["run"] == "completed"
        and output == b_output
        and final["requested"] == final["processed"] == 2
        and left == 0
        and b_final == "accepted",
        f"run {final['run']}, output = B's result: {output == b_output}, work "
        f"{final['requested']}/{final['processed']}, messages left {left}",
        mode,
    )


FALSY: list[Json] = [0, False, "", [], {}, None]
POLL_DEADLINE = 3.0  # seconds the worker gets to settle the falsy runs (they take milliseconds; a liveness bound)


def _falsy_results(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    """The real V2Worker settles a handler's falsy value exactly as returned (a known defect of
    the engine this is modelled on stored them as null)."""
    with connect(url, application_name="falsy") as conn:
        flow = _falsy_flow(mode)
        compile_flow(conn, flow)
        runs = [v2.start_run(conn, "falsy", {"value": value}) for value in FALSY]
        quick = WorkerConfig(shutdown_grace=1.0)  # a handler stuck in a broken worker is not waited for
        with V2Worker.serving(url, flow, step_of(flow, "A"), name="falsy_worker", config=quick) as worker:
            deadline = time.monotonic() + POLL_DEADLINE
            while worker.stats.verdicts["accepted"] < len(runs) and time.monotonic() < deadline:
                bounded(lambda: worker.poll(wait_for_handlers=True), POLL_DEADLINE, "the falsy worker's poll")
        found = rows(
            conn,
            "select r.input->'value' as returned, s.result as settled, "
            "s.result = r.input->'value' and jsonb_typeof(s.result) = jsonb_typeof(r.input->'value') as exact "
            "from engine.runs r left join engine.task_claims c on c.run_id = r.run_id and c.step_slug = 'A' "
            "left join engine.task_settlements s on s.claim_id = c.claim_id "
            "where r.flow_slug = 'falsy' order by r.started_at",
        )
        consistency.check(result, conn, mode, "falsy results settled")
    result.append_rows("falsy_results", [r | {"mode": mode} for r in found])
    exact = [r for r in found if r["exact"]]
    result.gate(
        "falsy_results_are_settled_exactly",
        len(exact) == len(FALSY),
        f"{len(exact)}/{len(FALSY)} settled exactly: "
        + ", ".join(f"{json.dumps(r['returned'])} -> {json.dumps(r['settled'])}" for r in found),
        mode,
    )


def _falsy_flow(mode: QueueMode) -> AnyFlow:
    flow: Flow[ABSteps] = Flow("falsy", max_attempts=1, timeout=30)
    flow.add("A", lambda payload: payload["value"] if isinstance(payload, dict) else None)
    flow.add("B", lambda payload: payload, deps=["A"])
    return with_step_queues(flow) if mode == "step" else flow


PARTS = [
    PartSpec("proof", single_database(_prove)),
    PartSpec("falsy_results", single_database(_falsy_results)),
]
