"""v2_take_over: refused before the horizon, one controlled takeover after it, attention after."""

from __future__ import annotations

from evidence_lib.engine import v2
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.harness.waits import wait_for_lease_expiry
from evidence_lib.pg.db import Conn, connect, rows
from tests.helpers import assert_refused, queue_messages, scalar
from tests.v2_helpers import Started, claim_a, start

TAKE = "select * from engine.v2_take_over(%s, 'A', %s, %s, array[%s]::bigint[])"


def _expired(conn: Conn) -> tuple[Started, v2.Grant]:
    s = start(conn, "step", timeout=1)  # lease horizon = claim time + 3 s
    first = claim_a(conn, s)
    wait_for_lease_expiry(conn, first.claim_id)
    return s, first


def _taken_over_twice(conn: Conn) -> tuple[Started, v2.Grant, v2.Grant]:
    s, first = _expired(conn)
    second = v2.take_over(conn, s.run_id, "A", first.claim_id, s.queue_a, s.msg_a)
    assert second is not None
    wait_for_lease_expiry(conn, second.claim_id)
    assert v2.take_over(conn, s.run_id, "A", second.claim_id, s.queue_a, s.msg_a) is None
    return s, first, second


def test_a_takeover_before_the_horizon_is_refused_with_dr007(conn: Conn) -> None:
    s = start(conn, "step", timeout=1)
    first = claim_a(conn, s)
    args = (s.run_id, first.claim_id, s.queue_a, s.msg_a)
    assert_refused(conn, TAKE, args, SqlState.TAKEOVER_BEFORE_HORIZON, str(first.claim_id))


def test_a_takeover_of_a_claim_that_is_not_current_is_refused_with_dr006(conn: Conn) -> None:
    s = start(conn, "step", timeout=1)
    claim_a(conn, s)
    assert_refused(conn, TAKE, (s.run_id, s.run_id, s.queue_a, s.msg_a), SqlState.NOT_CLAIMABLE)


def test_a_takeover_after_the_horizon_revokes_the_old_claim_and_changes_nothing_else_in_its_row(conn: Conn) -> None:
    s, first = _expired(conn)
    before = rows(conn, "select * from engine.task_claims")[0]
    second = v2.take_over(conn, s.run_id, "A", first.claim_id, s.queue_a, s.msg_a)
    assert second is not None
    old = rows(conn, "select * from engine.task_claims where claim_id = %s", (first.claim_id,))[0]
    assert old["state"] == "revoked" and old["replaced_by"] == second.claim_id and old["revoked_at"]
    kept = ("state", "revoked_at", "replaced_by")
    assert {k: v for k, v in old.items() if k not in kept} == {k: v for k, v in before.items() if k not in kept}


def test_a_takeover_grants_a_new_claim_counts_one_infrastructure_loss_and_moves_vt_to_its_horizon(
    conn: Conn,
) -> None:
    s, first = _expired(conn)
    second = v2.take_over(conn, s.run_id, "A", first.claim_id, s.queue_a, s.msg_a)
    assert second is not None and second.message_id == s.msg_a and second.input == {"n": 1}
    new = rows(conn, "select * from engine.task_claims where claim_id = %s", (second.claim_id,))[0]
    assert new["state"] == "current" and new["attempt"] == 2
    task = rows(conn, "select attempts_count, infrastructure_losses, status from engine.step_tasks")[0]
    assert task == {"attempts_count": 1, "infrastructure_losses": 1, "status": "started"}
    assert scalar(conn, f"select vt from pgmq.q_{s.queue_a} where msg_id = %s", (s.msg_a,)) == second.lease_expires_at


def test_a_takeover_past_the_budget_commits_attention_keeps_the_message_and_writes_nothing_else(
    conn: Conn, db_url: str
) -> None:
    s, first = _expired(conn)
    second = v2.take_over(conn, s.run_id, "A", first.claim_id, s.queue_a, s.msg_a)
    assert second is not None
    wait_for_lease_expiry(conn, second.claim_id)
    snap = snapshot(conn)
    assert v2.take_over(conn, s.run_id, "A", second.claim_id, s.queue_a, s.msg_a) is None
    assert list(diff(snap, snapshot(conn))) == ["engine.run_work"]
    with connect(db_url) as other:  # committed, seen from another session
        work = v2.work_row(other, s.run_id)
    assert work["health"] == "attention" and "takeover" in work["attention_reason"]
    assert [m["msg_id"] for m in queue_messages(conn, s.queue_a)] == [s.msg_a]


def test_under_attention_a_takeover_is_refused_with_dr006(conn: Conn) -> None:
    s, _first, second = _taken_over_twice(conn)
    assert_refused(conn, TAKE, (s.run_id, second.claim_id, s.queue_a, s.msg_a), SqlState.NOT_CLAIMABLE)


def test_under_attention_the_current_claim_still_settles_and_the_revoked_one_is_stale(conn: Conn) -> None:
    _s, first, second = _taken_over_twice(conn)
    assert v2.settle(conn, second.claim_id, "completed", {"late": True}).verdict == "accepted"
    assert v2.settle(conn, first.claim_id, "completed", {"late": True}).verdict == "stale"
