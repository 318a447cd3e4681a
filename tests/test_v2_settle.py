"""v2_settle: argument refusals, and each verdict with its exact writes (or none)."""

from __future__ import annotations

import json

import pytest

from evidence_lib.engine import v2
from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.pg.db import Conn, rows
from tests.helpers import assert_refused, queue_messages, scalar
from tests.v2_helpers import claim_a, start, through_b_claim

SETTLE = "select * from engine.v2_settle(%s, %s, %s::jsonb)"


@pytest.mark.parametrize(
    ("outcome", "result", "sqlstate"),
    [
        ("done", "1", SqlState.BAD_OUTCOME_OR_RESULT),
        (None, "1", SqlState.BAD_OUTCOME_OR_RESULT),
        ("completed", None, SqlState.BAD_OUTCOME_OR_RESULT),
        ("completed", json.dumps("x" * 262_143), SqlState.PAYLOAD_TOO_LARGE),
    ],
    ids=[
        "an_unknown_outcome_is_dr009",
        "a_null_outcome_is_dr009",
        "an_sql_null_result_is_dr009",
        "a_result_over_262144_bytes_is_dr002",
    ],
)
def test_a_bad_settlement_argument_is_refused_and_names_the_claim(
    conn: Conn, outcome: str | None, result: str | None, sqlstate: SqlState
) -> None:
    grant = claim_a(conn, start(conn))
    assert_refused(conn, SETTLE, (grant.claim_id, outcome, result), sqlstate, str(grant.claim_id))


def test_an_unknown_claim_is_refused_with_dr013(conn: Conn) -> None:
    claim_a(conn, start(conn))
    assert_refused(
        conn, "select * from engine.v2_settle(gen_random_uuid(), 'completed', '1')", None, SqlState.UNKNOWN_CLAIM
    )


@pytest.mark.parametrize("mode", ["flow", "step"])
def test_accepted_completed_writes_exactly_its_rows_and_leaves_b_alone(conn: Conn, mode: str) -> None:
    s = start(conn, mode)  # type: ignore[arg-type]
    grant = claim_a(conn, s)
    before = snapshot(conn)
    receipt = v2.settle(conn, grant.claim_id, "completed", {"a": [1, 2]})
    assert (receipt.verdict, receipt.outcome, receipt.result, receipt.generation) == (
        "accepted",
        "completed",
        {"a": [1, 2]},
        1,
    )
    changed = diff(before, snapshot(conn))
    assert set(changed) == {
        "engine.task_settlements",
        "engine.step_tasks",
        "engine.step_states",
        "engine.task_claims",
        "engine.run_work",
        f"pgmq.q_{s.queue_a}",
        f"pgmq.a_{s.queue_a}",
    }
    assert rows(conn, "select status, output from engine.step_tasks") == [
        {"status": "completed", "output": {"a": [1, 2]}}
    ]
    assert dict(conn.execute("select step_slug, status from engine.step_states").fetchall()) == {
        "A": "completed",
        "B": "created",
    }
    assert scalar(conn, "select state from engine.task_claims") == "settled"
    assert scalar(conn, "select status from engine.runs") == "started"
    assert v2.work_row(conn, s.run_id)["requested_generation"] == 1
    assert queue_messages(conn, s.queue_a) == [] and queue_messages(conn, s.queue_b) == []


def test_replayed_conflict_stale_and_terminal_write_nothing(conn: Conn) -> None:
    s = start(conn)
    grant = claim_a(conn, s)
    accepted = v2.settle(conn, grant.claim_id, "completed", {"a": 1})
    before = snapshot(conn)
    replayed = v2.settle(conn, grant.claim_id, "completed", {"a": 1})
    assert replayed.verdict == "replayed"
    assert (replayed.outcome, replayed.result, replayed.generation, replayed.settled_at) == (
        accepted.outcome,
        accepted.result,
        accepted.generation,
        accepted.settled_at,
    )
    for outcome, result in (("completed", {"a": 2}), ("failed", {"a": 1})):
        conflict = v2.settle(conn, grant.claim_id, outcome, result)  # type: ignore[arg-type]
        assert conflict.verdict == "conflict" and conflict.result == {"a": 1}
    assert diff(before, snapshot(conn)) == {}

    # terminal: the run was terminalized by another path (set up directly here)
    b = through_b_claim(conn, start(conn, slug="term"))
    conn.execute("update engine.runs set status = 'failed', failed_at = now() where run_id = %s", (b.run_id,))
    before = snapshot(conn)
    terminal = v2.settle(conn, b.claim_id, "completed", "b")
    assert (terminal.verdict, terminal.outcome, terminal.result, terminal.settled_at) == (
        "terminal",
        None,
        None,
        None,
    )
    assert terminal.generation == v2.work_row(conn, b.run_id)["requested_generation"]
    assert diff(before, snapshot(conn)) == {}


def test_a_replay_after_the_run_finished_is_still_replayed(conn: Conn) -> None:
    s = start(conn)
    b = through_b_claim(conn, s)
    v2.settle(conn, b.claim_id, "completed", "b")
    v2.reconcile(conn, s.run_id)
    assert scalar(conn, "select status from engine.runs") == "completed"
    before = snapshot(conn)
    assert v2.settle(conn, b.claim_id, "completed", "b").verdict == "replayed"
    assert diff(before, snapshot(conn)) == {}


def test_a_failed_settlement_fails_the_run_synchronously(conn: Conn) -> None:
    s = start(conn)
    grant = claim_a(conn, s)
    receipt = v2.settle(conn, grant.claim_id, "failed", {"error": "boom"})
    assert receipt.verdict == "accepted"
    assert rows(conn, "select status, failed_at is not null as failed from engine.runs") == [
        {"status": "failed", "failed": True}
    ]
    assert dict(conn.execute("select step_slug, status from engine.step_states").fetchall()) == {
        "A": "failed",
        "B": "cancelled",
    }
    assert scalar(conn, "select status from engine.step_tasks") == "failed"
    assert queue_messages(conn, s.queue_a) == []
    report = v2.reconcile(conn, s.run_id)  # a terminal run only gets its generation processed
    assert (report.actions, report.processed, report.run_status) == (0, True, "failed")


@pytest.mark.parametrize("value", [0, False, "", [], {}, None], ids=repr)
def test_falsy_results_are_settled_exactly(conn: Conn, value: Json) -> None:
    grant = claim_a(conn, start(conn))
    assert v2.settle(conn, grant.claim_id, "completed", value).result == value
    assert scalar(conn, "select output::text from engine.step_tasks") == json.dumps(value)
    assert v2.settle(conn, grant.claim_id, "completed", value).verdict == "replayed"


def test_generations_never_wrap_or_decrease(conn: Conn) -> None:
    s = start(conn)
    grant = claim_a(conn, s)
    conn.execute(
        "update engine.run_work set requested_generation = 9223372036854775807, "
        "processed_generation = 9223372036854775807"
    )  # the end of bigint (setup)
    assert_refused(conn, SETTLE, (grant.claim_id, "completed", "1"), "22003")
    assert_refused(conn, "update engine.run_work set requested_generation = 5", None, "23514")
    assert_refused(conn, "update engine.run_work set processed_generation = 5", None, "23514")
