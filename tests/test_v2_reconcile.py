"""v2_reconcile: refusals, chunking, rollback of a failing action, restart after committed
progress, re-dirtying, and a real poison isolated to its run."""

from __future__ import annotations

import psycopg
import pytest

from evidence_lib.engine import v2
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness import Controller, Session
from evidence_lib.harness.ab_flow import read_step_message
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.harness.waits import wait_for_backoff
from evidence_lib.pg.db import Conn, connect, rows
from tests.helpers import assert_refused, queue_messages, scalar
from tests.v2_helpers import claim_a, start, through_b_claim

RECONCILE = "select * from engine.v2_reconcile(%s, %s)"


def _settled_a(conn: Conn, mode: str = "flow", slug: str = "ab") -> v2.Grant:
    s = start(conn, mode, slug)  # type: ignore[arg-type]
    grant = claim_a(conn, s)
    v2.settle(conn, grant.claim_id, "completed", {"a": 1})
    return grant


@pytest.mark.parametrize("max_actions", [0, 65, None])
def test_max_actions_outside_1_to_64_is_refused_with_dr008(conn: Conn, max_actions: int | None) -> None:
    s = start(conn)
    assert_refused(conn, RECONCILE, (s.run_id, max_actions), SqlState.ARGUMENT_OUT_OF_RANGE, str(s.run_id))


def test_an_unknown_run_is_refused_with_dr014(conn: Conn) -> None:
    start(conn)
    assert_refused(conn, RECONCILE, ("00000000-0000-0000-0000-000000000000", 8), SqlState.UNKNOWN_OBJECT)


def test_a_v1_run_is_refused_with_dr015(conn: Conn) -> None:
    start(conn)
    v1_run = scalar(conn, "select engine.start_flow('ab', '{}')")
    assert_refused(conn, RECONCILE, (v1_run, 8), SqlState.V2_CALL_ON_V1_RUN, str(v1_run))


def test_a_call_with_nothing_to_do_writes_nothing(conn: Conn) -> None:
    s = start(conn)
    before = snapshot(conn)
    report = v2.reconcile(conn, s.run_id)
    assert (report.actions, report.processed, report.health) == (0, True, "clean")
    assert diff(before, snapshot(conn)) == {}


def test_one_action_dispatches_b_whole_and_then_the_generation_is_processed(conn: Conn) -> None:
    grant = _settled_a(conn)
    first = v2.reconcile(conn, grant.run_id, max_actions=1)
    assert (first.actions, first.processed, first.generation) == (1, True, 1)
    [task] = rows(conn, "select status, queue_name, message_id from engine.step_tasks where step_slug = 'B'")
    [message] = queue_messages(conn, "ab")
    assert task == {"status": "queued", "queue_name": "ab", "message_id": message["msg_id"]}
    assert scalar(conn, "select status from engine.step_states where step_slug = 'B'") == "started"


def test_a_second_call_after_the_dispatch_finds_nothing_and_writes_nothing(conn: Conn) -> None:
    grant = _settled_a(conn)
    v2.reconcile(conn, grant.run_id, max_actions=1)
    before = snapshot(conn)
    assert v2.reconcile(conn, grant.run_id).actions == 0
    assert diff(before, snapshot(conn)) == {}


def test_a_failing_action_rolls_back_entirely_and_backs_off(conn: Conn) -> None:
    grant = _settled_a(conn)
    conn.execute("set engine.hooks = 'reconcile.action:fail'")
    report = v2.reconcile(conn, grant.run_id)
    conn.execute("reset engine.hooks")
    assert (report.actions, report.processed, report.health) == (0, False, "backoff")
    assert scalar(conn, "select status from engine.step_states where step_slug = 'B'") == "created"
    assert scalar(conn, "select count(*) from engine.step_tasks where step_slug = 'B'") == 0
    assert queue_messages(conn, "ab") == []  # A's message was archived; B's was never kept
    [error] = rows(conn, "select * from engine.engine_errors")
    assert (error["sqlstate"], error["action"], error["generation"]) == (SqlState.HOOK_FAILED, "dispatch_b", 1)
    work = v2.work_row(conn, grant.run_id)
    assert work["consecutive_errors"] == 1
    assert scalar(
        conn,
        "select next_attempt_at = occurred_at + interval '1 second' from engine.run_work, engine.engine_errors",
    )
    before = snapshot(conn)
    assert v2.reconcile(conn, grant.run_id).actions == 0  # in backoff: skipped, nothing written
    assert diff(before, snapshot(conn)) == {}


def test_a_reconciler_killed_mid_dispatch_leaves_nothing_and_the_restart_dispatches_b_once(
    conn: Conn, db_url: str
) -> None:
    grant = _settled_a(conn, "step")
    controller = Controller(db_url)
    victim = Session(db_url, "reconciler", hooks=["reconcile.action"])
    try:
        controller.hold("reconcile.action")
        future = victim.send(lambda c: v2.reconcile(c, grant.run_id))
        proof = controller.settle(victim, future)
        assert proof and proof[0].locktype == "advisory"  # parked after sending B's message
        controller.terminate(victim)  # the reconciler dies mid-action
        with pytest.raises(psycopg.OperationalError):  # the connection was killed
            future.result(timeout=10)
    finally:
        controller.close()
        victim.close()
    assert queue_messages(conn, "ab__b") == []  # the killed call's send rolled back
    assert scalar(conn, "select count(*) from engine.step_tasks where step_slug = 'B'") == 0
    assert v2.reconcile(conn, grant.run_id).actions == 1
    assert scalar(conn, "select count(*) from engine.step_tasks where step_slug = 'B'") == 1
    assert len(queue_messages(conn, "ab__b")) == 1


def test_a_settlement_after_processing_redirties_the_run(conn: Conn) -> None:
    s = start(conn)
    b = through_b_claim(conn, s)
    assert v2.work_row(conn, s.run_id)["processed_generation"] == 1
    v2.settle(conn, b.claim_id, "completed", "b")
    work = v2.work_row(conn, s.run_id)
    assert (work["requested_generation"], work["processed_generation"]) == (2, 1)
    report = v2.reconcile(conn, s.run_id)
    assert (report.actions, report.processed, report.run_status) == (1, True, "completed")
    assert scalar(conn, "select output from engine.runs") == "b"


def test_a_real_poison_is_isolated_to_its_run(conn: Conn, db_url: str) -> None:
    poisoned = _settled_a(conn, "step", "poison")
    s2 = start(conn, "step", "poison")  # another run of the same flow, with a current claim
    other_claim = v2.claim(conn, s2.run_id, "A", s2.queue_a, s2.msg_a)
    assert other_claim is not None
    healthy = start(conn, "step", "healthy")  # a run of another flow
    conn.execute("select pgmq.drop_queue('poison__b')")  # behind the engine's back
    queues_before = {q: queue_messages(conn, q) for q in ("poison__a", "healthy__a")}

    for expected_errors, expected_health in ((1, "backoff"), (2, "backoff"), (3, "attention")):
        report = v2.reconcile(conn, poisoned.run_id)
        work = v2.work_row(conn, poisoned.run_id)
        assert (report.health, work["consecutive_errors"]) == (expected_health, expected_errors)
        if expected_health == "backoff":
            before = snapshot(conn)
            assert v2.reconcile(conn, poisoned.run_id).actions == 0  # before next_attempt_at
            assert diff(before, snapshot(conn)) == {}
            wait_for_backoff(conn, poisoned.run_id)
    errors = rows(conn, "select sqlstate, action, message from engine.engine_errors order by error_id")
    assert [e["sqlstate"] for e in errors] == ["42P01"] * 3 and {e["action"] for e in errors} == {"dispatch_b"}
    assert (
        scalar(
            conn,
            "select extract(epoch from next_attempt_at - occurred_at) from engine.run_work "
            "join engine.engine_errors using (run_id) order by error_id desc limit 1",
        )
        == 4
    )
    work = v2.work_row(conn, poisoned.run_id)
    assert work["health"] == "attention" and "3 consecutive engine errors" in work["attention_reason"]
    b_tasks = "select count(*) from engine.step_tasks where run_id = %s and step_slug = 'B'"
    assert scalar(conn, b_tasks, (poisoned.run_id,)) == 0  # no half-done B: no task without its message
    before = snapshot(conn)
    assert v2.reconcile(conn, poisoned.run_id).actions == 0  # attention: skipped
    assert diff(before, snapshot(conn)) == {}
    # messages intact, the other run's current claim still settles, the other flow completes
    assert {q: queue_messages(conn, q) for q in ("poison__a", "healthy__a")} == queues_before
    assert v2.settle(conn, other_claim.claim_id, "completed", 1).verdict == "accepted"
    with connect(db_url) as other:
        grant = claim_a(other, healthy)
        v2.settle(other, grant.claim_id, "completed", 1)
        v2.reconcile(other, healthy.run_id)
        b = v2.claim(
            other,
            healthy.run_id,
            "B",
            healthy.queue_b,
            read_step_message(other, healthy.flow, "B", healthy.run_id),
        )
        assert b is not None
        v2.settle(other, b.claim_id, "completed", 2)
        assert v2.reconcile(other, healthy.run_id).run_status == "completed"
