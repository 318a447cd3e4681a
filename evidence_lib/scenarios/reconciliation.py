"""Scenario 4, reconciliation and poison isolation: rollback of a failing action (nothing
half-done), restart after committed progress (no duplicate B), re-dirtying, durable engine
errors with backoff, attention after 3 errors with messages intact, claims refused and valid
current claims still settling, and other runs progressing meanwhile.
"""

from __future__ import annotations

import threading
import time
from typing import Any
from uuid import UUID

import matplotlib.pyplot as plt
import psycopg

from evidence_lib.engine import v1, v2
from evidence_lib.engine.flows import AnyFlow, QueueMode, route
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness import Session
from evidence_lib.harness.ab_flow import define_ab, read_step_message, step_of
from evidence_lib.harness.faults import drop_route_queue, held_hook, kill_at_hook
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.harness.waits import WaitTimeout, wait_for_backoff, wait_for_lease_expiry
from evidence_lib.pg.db import Conn, connect, one, rows
from evidence_lib.plain import plain
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios import wakeups, worker_paths
from evidence_lib.scenarios.support import consistency
from evidence_lib.scenarios.support.parts import PartSpec, candidate_databases, run_parts, single_database
from evidence_lib.scenarios.support.setup import modes, scenario_server, timed
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.v2 import V2Worker

SCENARIO = "04_reconciliation"


def run(queue_modes: str = "flow,step", database_url: str = "", hooks: str = "") -> ScenarioResult:
    result = ScenarioResult(
        SCENARIO, "Reconciliation and poison isolation", {"queue_modes": queue_modes, "hooks": hooks}
    )
    with (
        result.capture_logs(),
        scenario_server(database_url) as server,
        candidate_databases(server, hooks=hooks) as databases,
    ):
        run_parts(result, PARTS, databases, modes(queue_modes))
    consistency.gates(result)
    _backoff_chart(result)
    result.timing_chart("phases", "Reconciliation: every phase (ms)")
    return result


def _settled_a(conn: Conn, flow: AnyFlow, slug: str) -> UUID:
    run_id = v2.start_run(conn, slug, {"n": 1})
    grant = v2.claim(conn, run_id, "A", route(flow, "A"), read_step_message(conn, flow, "A", run_id))
    assert grant is not None
    v2.settle(conn, grant.claim_id, "completed", {"a": 1})
    return run_id


def _b_rows(conn: Conn, run_id: UUID) -> dict[str, Any]:
    return rows(
        conn,
        "select (select status from engine.step_states where run_id = %(r)s and step_slug = 'B') "
        "as b_step, (select count(*) from engine.step_tasks where run_id = %(r)s and step_slug = 'B') "
        "as b_tasks, (select message_id from engine.step_tasks where run_id = %(r)s "
        "and step_slug = 'B') as b_message",
        {"r": run_id},
    )[0]


def _rollback_and_restart(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    with connect(url, application_name="reconciliation") as conn:
        flow = define_ab(conn, "rec", mode)
        # 1. a failing action rolls back entirely, is recorded durably, backs off
        run_id = _settled_a(conn, flow, "rec")
        conn.execute("set engine.hooks = 'reconcile.action:fail'")
        raised = ""
        with timed(result, "reconcile with a failing action", mode=mode):
            try:
                report: v2.Report | None = v2.reconcile(conn, run_id)
            except psycopg.Error as exc:  # the call must report the failure, not raise it
                report, raised = None, f"the call raised [{exc.sqlstate}] {exc.diag.message_primary}"
        conn.execute("reset engine.hooks")
        b = _b_rows(conn, run_id)
        errors = rows(
            conn, "select action, sqlstate, generation from engine.engine_errors where run_id = %s", (run_id,)
        )
        work = v2.work_row(conn, run_id)
        result.gate(
            "failing_action_rolled_back_entirely",
            b == {"b_step": "created", "b_tasks": 0, "b_message": None}
            and report is not None
            and report.actions == 0
            and not report.processed,
            f"after the failure: B {plain(b)}; "
            + (
                raised or f"report {report.actions if report else '-'} actions, processed {report and report.processed}"
            ),
            mode,
        )
        result.gate(
            "engine_error_recorded_with_backoff",
            len(errors) == 1
            and errors[0]["sqlstate"] == SqlState.HOOK_FAILED
            and work["health"] == "backoff"
            and work["consecutive_errors"] == 1,
            f"errors {plain(errors)}; health {work['health']}" + (f"; {raised}" if raised else ""),
            mode,
        )
        wait_for_backoff(conn, run_id)
        recovered = v2.reconcile(conn, run_id)
        result.gate(
            "next_call_after_backoff_recovers",
            recovered.processed and recovered.health == "clean",
            f"report {plain(recovered)}",
            mode,
        )

        # 2. restart after committed progress (A's settlement): a reconciler dies mid-dispatch
        run_id = _settled_a(conn, flow, "rec")
        victim = Session(url, "doomed_reconciler", hooks=["reconcile.action"])
        try:
            with (
                connect(url, application_name="controller") as controller,
                held_hook(controller, "reconcile.action") as key,
                timed(result, "kill a reconciler parked after dispatching B", mode=mode),
            ):
                future = victim.send(lambda c: v2.reconcile(c, run_id))
                kill = kill_at_hook(controller, "doomed_reconciler", "reconcile.action", key)
            died = future.exception(timeout=10) is not None
        finally:
            victim.close()
        after_kill = _b_rows(conn, run_id)
        b_queue = f"pgmq.q_{route(flow, 'B')}"
        b_live = f"select count(*) from {b_queue} where message->>'run_id' = %s and message->>'step_slug' = 'B'"
        live_after_kill = one(conn, b_live, (str(run_id),))
        consistency.check(result, conn, mode, "a reconciler killed mid-dispatch")
        final = v2.reconcile(conn, run_id)
        b = _b_rows(conn, run_id)
        queued_b = one(conn, b_live, (str(run_id),))
        result.gate(
            "restart_after_committed_progress_creates_b_once",
            died
            and after_kill == {"b_step": "created", "b_tasks": 0, "b_message": None}
            and live_after_kill == 0
            and b["b_tasks"] == 1
            and queued_b == 1
            and final.actions == 1
            and final.processed,
            f"killed at {kill.point} (pid {kill.pid}, proven: {kill.proof[0].describe()}): B left "
            f"{plain(after_kill)}, B messages {live_after_kill}; the next call: {final.actions} action, B tasks "
            f"{b['b_tasks']}, B messages {queued_b}",
            mode,
        )

        # 3. re-dirtying: a settlement after processing makes the run dirty again
        grant_b = v2.claim(conn, run_id, "B", route(flow, "B"), read_step_message(conn, flow, "B", run_id))
        assert grant_b is not None
        v2.settle(conn, grant_b.claim_id, "completed", "b")
        dirty = v2.work_row(conn, run_id)
        done = v2.reconcile(conn, run_id)
        consistency.check(result, conn, mode, "B settled and the run reconciled")
        result.gate(
            "settlement_redirties_and_reconcile_finishes",
            dirty["requested_generation"] == dirty["processed_generation"] + 1 and done.run_status == "completed",
            f"after B's settlement: requested {dirty['requested_generation']}, processed "
            f"{dirty['processed_generation']}; then run {done.run_status}",
            mode,
        )


POISON_DEADLINE = 30.0  # seconds: backoffs of 1 s and 2 s, then attention; a liveness bound


def _poison(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    with connect(url, application_name="poison") as conn:
        flow = define_ab(conn, "poison", mode)
        healthy_flow = define_ab(conn, "healthy", mode)
        poisoned = _settled_a(conn, flow, "poison")
        others = [v2.start_run(conn, "healthy", {"i": i}) for i in range(5)]
        consistency.check(result, conn, mode, "before the route queue is dropped")
        watched = [q for q in {route(healthy_flow, "A"), route(healthy_flow, "B")}]
        drop_route_queue(conn, route(flow, "B"))  # behind the engine's back
        reconciler = Reconciler(url, poll_interval=0.02, name="driver")
        thread = threading.Thread(target=reconciler.run)
        thread.start()
        try:
            with (
                V2Worker.serving(url, healthy_flow, step_of(healthy_flow, "A"), name="healthy_a") as wa,
                V2Worker.serving(url, healthy_flow, step_of(healthy_flow, "B"), name="healthy_b") as wb,
                timed(result, "poisoned run to attention while 5 others complete", mode=mode),
            ):
                deadline = time.monotonic() + POISON_DEADLINE
                while True:
                    if time.monotonic() > deadline:
                        raise WaitTimeout(
                            f"within {POISON_DEADLINE:.0f} s the poisoned run did not reach attention "
                            f"(health {v2.work_row(conn, poisoned)['health']}) or the {len(others)} other runs "
                            "did not complete"
                        )
                    wa.poll(wait_for_handlers=True)
                    wb.poll(wait_for_handlers=True)
                    done = one(
                        conn,
                        "select count(*) from engine.runs where flow_slug = 'healthy' and status = 'completed'",
                    )
                    if done == len(others) and v2.work_row(conn, poisoned)["health"] == "attention":
                        break
                    reconciler._stop.wait(0.05)  # progress poll while backoffs really pass
        finally:
            reconciler.stop()
            thread.join(10)
        errors = rows(
            conn,
            "select error_id, action, sqlstate, message, occurred_at, generation "
            "from engine.engine_errors where run_id = %s order by error_id",
            (poisoned,),
        )
        work = v2.work_row(conn, poisoned)
        backoffs = []
        for i, e in enumerate(errors, 1):
            backoffs.append(
                {
                    "mode": mode,
                    "error": i,
                    "sqlstate": e["sqlstate"],
                    "action": e["action"],
                    "occurred_at": e["occurred_at"],
                    "message": e["message"],
                }
            )
        result.append_rows("engine_errors", backoffs)
        half_done = _b_rows(conn, poisoned)
        result.gate(
            "durable_errors_then_attention_after_3",
            len(errors) == 3
            and work["health"] == "attention"
            and {e["sqlstate"] for e in errors} == {"42P01"}
            and half_done == {"b_step": "created", "b_tasks": 0, "b_message": None},
            f"{len(errors)} errors ({', '.join(e['sqlstate'] for e in errors)}); health {work['health']}; "
            f"B after the failed dispatches: {plain(half_done)}",
            mode,
        )
        gaps = [
            (errors[i]["occurred_at"] - errors[i - 1]["occurred_at"]).total_seconds() for i in range(1, len(errors))
        ]
        result.gate(
            "backoff_respected_between_attempts",
            len(gaps) == 2 and gaps[0] >= 1 and gaps[1] >= 2,
            f"seconds between errors: {[round(g, 2) for g in gaps]} (backoff 1 s, then 2 s)",
            mode,
        )
        before = snapshot(conn)
        skipped = v2.reconcile(conn, poisoned)
        result.gate(
            "attention_is_skipped_without_writes",
            skipped.actions == 0 and diff(before, snapshot(conn)) == {},
            f"reconcile under attention: {skipped.actions} actions, no row changed",
            mode,
        )
        done = one(conn, "select count(*) from engine.runs where flow_slug = 'healthy' and status = 'completed'")
        left = sum(int(one(conn, f"select count(*) from pgmq.q_{q}")) for q in watched)
        result.gate(
            "other_runs_progressed_meanwhile",
            done == len(others) and left == 0,
            f"{done}/{len(others)} runs of another flow completed during the backoffs",
            mode,
        )


def _takeover_attention(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    with connect(url, application_name="takeover") as conn:
        flow = define_ab(conn, "lease", mode, timeout=1)
        run_id = v2.start_run(conn, "lease", {})
        queue = route(flow, "A")
        msg = read_step_message(conn, flow, "A", run_id)
        first = v2.claim(conn, run_id, "A", queue, msg)
        assert first is not None
        wait_for_lease_expiry(conn, first.claim_id)
        second = v2.take_over(conn, run_id, "A", first.claim_id, queue, msg)
        assert second is not None
        wait_for_lease_expiry(conn, second.claim_id)
        exhausted = v2.take_over(conn, run_id, "A", second.claim_id, queue, msg)
        work = v2.work_row(conn, run_id)
        still_queued = one(conn, f"select count(*) from pgmq.q_{queue} where msg_id = %s", (msg,))
        result.gate(
            "second_takeover_sets_attention_and_leaves_the_message",
            exhausted is None and work["health"] == "attention" and still_queued == 1,
            f"health {work['health']} ({work['attention_reason']}); message in queue: {still_queued}",
            mode,
        )
        reread = v1.read_messages(conn, queue, 5, 10)  # a worker reads the left message again
        before = snapshot(conn)
        refused = [v2.claim(conn, run_id, "A", queue, m.msg_id) for m in reread]
        changed = diff(before, snapshot(conn))
        result.gate(
            "claims_refused_under_attention",
            len(reread) == 1 and refused == [None] and not changed,
            f"messages read again: {[m.msg_id for m in reread]}; grants: "
            f"{sum(g is not None for g in refused)}; rows changed "
            f"{sum(len(d.added) + len(d.removed) for d in changed.values())}",
            mode,
        )
        receipt = v2.settle(conn, second.claim_id, "completed", {"a": "settled under attention"})
        consistency.check(result, conn, mode, "settled under attention")
        result.gate(
            "valid_current_claim_still_settles",
            receipt.verdict == "accepted",
            f"current claim settled: {receipt.verdict}; the revoked one: "
            f"{v2.settle(conn, first.claim_id, 'completed', {}).verdict}",
            mode,
        )


def _backoff_chart(result: ScenarioResult) -> None:
    frame = result.tables.get("engine_errors")
    if frame is None or frame.empty:
        return
    fig, ax = plt.subplots(figsize=(8, 3))
    for mode, group in frame.groupby("mode"):
        start = group["occurred_at"].min()
        seconds = [(t - start).total_seconds() for t in group["occurred_at"]]
        ax.plot(seconds, group["error"], marker="o", label=f"{mode} mode")
    ax.set_xlabel("seconds since the first engine error")
    ax.set_ylabel("consecutive error")
    ax.set_yticks([1, 2, 3])
    ax.set_title("Poisoned run: engine errors respect next_attempt_at (1 s, 2 s), attention at 3")
    ax.legend()
    fig.tight_layout()
    result.chart("backoff", fig)


PARTS = [
    PartSpec("rollback_and_restart", single_database(_rollback_and_restart)),
    PartSpec("poison", single_database(_poison)),
    PartSpec("takeover_attention", single_database(_takeover_attention)),
    PartSpec("wakeups", single_database(wakeups.wakeups)),
    PartSpec("followup", single_database(worker_paths.followup)),
    PartSpec("operator_takeover", single_database(worker_paths.operator_takeover)),
]
