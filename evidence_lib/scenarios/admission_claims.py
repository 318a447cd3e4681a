"""Scenario 6, admission, continued: claim eligibility and every settlement verdict, each with
its exact writes read back (a zero-row diff for everything that must write nothing).

Eligibility states the protocol cannot reach on its own between two calls (work dirty with a
queued task, backoff, attention, a live definition changed, a terminal run) are set up by
writing the state directly, behind the engine's back, the way a concurrent writer or an
operator would leave it; the claim is then the only call under test.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

import psycopg

from evidence_lib.engine import v2
from evidence_lib.engine.flows import AnyFlow, QueueMode, route
from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.snapshots import Snapshot, diff, snapshot
from evidence_lib.harness.waits import wait_for_lease_expiry
from evidence_lib.pg.db import Conn, connect
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.support import consistency

# (state, the write that puts a fresh run with A's task queued into it, what the claim must do)
INELIGIBLE: list[tuple[str, str, str]] = [
    (
        "work_dirty",
        "update engine.run_work set requested_generation = requested_generation + 1 where run_id = %(run)s",
        "empty",
    ),
    (
        "health_backoff",
        "update engine.run_work set health = 'backoff', consecutive_errors = 1, "
        "next_attempt_at = clock_timestamp() + interval '1 hour' where run_id = %(run)s",
        "empty",
    ),
    (
        "health_attention",
        "update engine.run_work set health = 'attention', attention_reason = 'set by the evidence' "
        "where run_id = %(run)s",
        "empty",
    ),
    (
        "run_not_started",
        "update engine.runs set status = 'failed', failed_at = clock_timestamp() where run_id = %(run)s",
        "empty",
    ),
    (
        "definition_changed",
        "update engine.steps set timeout = 7 where flow_slug = %(flow)s and step_slug = 'B'",
        SqlState.DEFINITION_CHANGED,
    ),
]


def _changed_rows(before: Snapshot, conn: Conn) -> int:
    return sum(len(d.added) + len(d.removed) for d in diff(before, snapshot(conn)).values())


def eligibility(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    """Gates: a claim in each ineligible state grants nothing and writes nothing."""
    table = []
    with connect(url, application_name="eligibility") as conn:
        for state, write, expected in INELIGIBLE:
            slug = f"el_{state}"[:40]
            flow = define_ab(conn, slug, mode)
            run_id = v2.start_run(conn, slug, {"n": 1})
            msg = read_step_message(conn, flow, "A", run_id)
            conn.execute(write.encode(), {"run": run_id, "flow": slug})
            before = snapshot(conn)
            outcome, sqlstate = "empty", None
            try:
                grant = v2.claim(conn, run_id, "A", route(flow, "A"), msg)
                outcome = "empty" if grant is None else f"granted claim {grant.claim_id}"
            except psycopg.Error as exc:
                sqlstate = exc.sqlstate
                outcome = str(sqlstate)
            changed = _changed_rows(before, conn)
            ok = outcome == expected and changed == 0
            table.append(
                {
                    "mode": mode,
                    "state": state,
                    "expected": expected,
                    "outcome": outcome,
                    "rows_changed": changed,
                    "ok": ok,
                }
            )
    result.append_rows("claim_eligibility", table)
    for row in table:
        result.gate(
            f"claim_refused_when_{row['state']}",
            bool(row["ok"]),
            f"claim -> {row['outcome']} (expected {row['expected']}); rows changed {row['rows_changed']}",
            mode,
        )


def _claimed(conn: Conn, slug: str, mode: QueueMode, timeout: int = 30) -> tuple[AnyFlow, UUID, v2.Grant]:
    flow = define_ab(conn, slug, mode, timeout=timeout)
    run_id = v2.start_run(conn, slug, {"n": 1})
    grant = v2.claim(conn, run_id, "A", route(flow, "A"), read_step_message(conn, flow, "A", run_id))
    assert grant is not None, f"{slug}: A was not granted"
    return flow, run_id, grant


ACCEPTED_WRITES = {
    "engine.task_settlements",
    "engine.step_tasks",
    "engine.step_states",
    "engine.task_claims",
    "engine.run_work",
}


def _row(verdict: str, got: str, state: str, ok: bool) -> dict[str, Any]:
    return {"verdict": verdict, "got": got, "state": state, "ok": ok}


def verdicts(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    """Gates: accepted writes exactly its rows in one transaction; replayed, conflict, terminal
    and an unknown claim write nothing."""
    rows: list[dict[str, Any]] = []
    with connect(url, application_name="verdicts") as conn:
        flow, _, grant = _claimed(conn, "ver_a", mode)
        queue = route(flow, "A")
        before = snapshot(conn)
        accepted = v2.settle(conn, grant.claim_id, "completed", {"a": 1})
        changed = diff(before, snapshot(conn))
        state = conn.execute(
            "select c.state, t.status, ss.status, w.requested_generation, w.processed_generation, "
            f"(select count(*) from pgmq.q_{queue} where msg_id = t.message_id), "
            f"(select count(*) from pgmq.a_{queue} where msg_id = t.message_id) "
            "from engine.task_claims c join engine.step_tasks t using (run_id, step_slug) "
            "join engine.step_states ss using (run_id, step_slug) join engine.run_work w using (run_id) "
            "where c.claim_id = %s",
            (grant.claim_id,),
        ).fetchone()
        expected_state = ("settled", "completed", "completed", 1, 0, 0, 1)
        tables = {t for t in changed if t.startswith("engine.")}
        ok = accepted.verdict == "accepted" and state == expected_state and tables == ACCEPTED_WRITES
        rows.append(_row("accepted", accepted.verdict, str(state), ok and f"pgmq.a_{queue}" in changed))
        resubmissions: list[tuple[str, Json]] = [("replayed", {"a": 1}), ("conflict", {"a": 2})]
        for verdict, result_json in resubmissions:
            before = snapshot(conn)
            receipt = v2.settle(conn, grant.claim_id, "completed", result_json)
            n = _changed_rows(before, conn)
            ok = receipt.verdict == verdict and n == 0 and receipt.result == {"a": 1}
            rows.append(_row(verdict, receipt.verdict, f"rows changed {n}", ok))
        _, term_run, current = _claimed(conn, "ver_terminal", mode)
        conn.execute(
            "update engine.runs set status = 'failed', failed_at = now() where run_id = %s", (term_run,)
        )  # behind its back
        before = snapshot(conn)
        terminal = v2.settle(conn, current.claim_id, "completed", {"late": True})
        n = _changed_rows(before, conn)
        ok = terminal.verdict == "terminal" and n == 0 and terminal.outcome is None
        rows.append(_row("terminal", terminal.verdict, f"rows changed {n}", ok))
        before = snapshot(conn)
        sqlstate = None
        try:
            v2.settle(conn, UUID("00000000-0000-4000-8000-000000000000"), "completed", {})
        except psycopg.Error as exc:
            sqlstate = exc.sqlstate
        n = _changed_rows(before, conn)
        rows.append(
            _row("unknown claim", str(sqlstate), f"rows changed {n}", sqlstate == SqlState.UNKNOWN_CLAIM and n == 0)
        )
        conn.execute("update engine.runs set status = 'started', failed_at = null where run_id = %s", (term_run,))
        consistency.check(result, conn, mode, "every settlement verdict")
    result.append_rows("settlement_verdicts", [r | {"mode": mode} for r in rows])
    for row in rows:
        result.gate(
            f"settlement_verdict_{row['verdict'].replace(' ', '_')}_writes_exactly_what_it_must",
            bool(row["ok"]),
            f"got {row['got']}; {row['state']}",
            mode,
        )


def stale_verdict(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    """Gate: a settlement of a claim revoked by a takeover is stale and writes nothing (its own
    part: the lease must really expire, about 3 s)."""
    rows: list[dict[str, Any]] = []
    with connect(url, application_name="verdicts") as conn:
        stale_flow, stale_run, old = _claimed(conn, "ver_stale", mode, timeout=1)
        wait_for_lease_expiry(conn, old.claim_id)
        new = v2.take_over(conn, stale_run, "A", old.claim_id, route(stale_flow, "A"), old.message_id)
        before = snapshot(conn)
        try:
            stale = v2.settle(conn, old.claim_id, "completed", {"late": True})
            got: str = stale.verdict
            ok = stale.verdict == "stale" and stale.outcome is None
        except psycopg.Error as exc:  # an error is not the stale verdict: recorded, not raised
            got, ok = f"[{exc.sqlstate}] {exc.diag.message_primary}", False
        n = _changed_rows(before, conn)
        rows.append(_row("stale", got, f"rows changed {n}", ok and new is not None and n == 0))
    result.append_rows("settlement_verdicts", [r | {"mode": mode} for r in rows])
    for row in rows:
        result.gate(
            f"settlement_verdict_{row['verdict']}_writes_exactly_what_it_must",
            bool(row["ok"]),
            f"got {row['got']}; {row['state']}",
            mode,
        )
