"""v2_take_over: refused before the horizon, one controlled takeover after it, attention after."""

from __future__ import annotations

from evidence_lib.engine import v2
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.harness.waits import wait_for_lease_expiry
from evidence_lib.pg.db import Conn, connect, rows
from tests.helpers import assert_refused, queue_messages, scalar
from tests.v2_helpers import claim_a, start

TAKE = "select * from engine.v2_take_over(%s, 'A', %s, %s, array[%s]::bigint[])"


def test_takeover_lifecycle(conn: Conn, db_url: str) -> None:
    s = start(conn, "step", timeout=1)  # lease horizon = claim time + 3 s
    first = claim_a(conn, s)
    assert_refused(
        conn,
        TAKE,
        (s.run_id, first.claim_id, s.queue_a, s.msg_a),
        SqlState.TAKEOVER_BEFORE_HORIZON,
        str(first.claim_id),
    )
    assert_refused(
        conn, TAKE, (s.run_id, s.run_id, s.queue_a, s.msg_a), SqlState.NOT_CLAIMABLE
    )  # not the current claim
    before = rows(conn, "select * from engine.task_claims")[0]

    wait_for_lease_expiry(conn, first.claim_id)
    second = v2.take_over(conn, s.run_id, "A", first.claim_id, s.queue_a, s.msg_a)
    assert second is not None and second.message_id == s.msg_a and second.input == {"n": 1}
    old, new = rows(conn, "select * from engine.task_claims order by attempt")
    assert old["state"] == "revoked" and old["replaced_by"] == second.claim_id and old["revoked_at"]
    assert {k: v for k, v in old.items() if k not in ("state", "revoked_at", "replaced_by")} == {
        k: v for k, v in before.items() if k not in ("state", "revoked_at", "replaced_by")
    }
    assert new["state"] == "current" and new["attempt"] == 2 and new["claim_id"] == second.claim_id
    task = rows(conn, "select attempts_count, infrastructure_losses, status from engine.step_tasks")[0]
    assert task == {"attempts_count": 1, "infrastructure_losses": 1, "status": "started"}
    assert scalar(conn, f"select vt from pgmq.q_{s.queue_a} where msg_id = %s", (s.msg_a,)) == second.lease_expires_at

    wait_for_lease_expiry(conn, second.claim_id)
    snap = snapshot(conn)
    assert v2.take_over(conn, s.run_id, "A", second.claim_id, s.queue_a, s.msg_a) is None
    changed = diff(snap, snapshot(conn))
    assert list(changed) == ["engine.run_work"]  # attention, nothing else
    with connect(db_url) as other:  # committed, seen from another session
        work = v2.work_row(other, s.run_id)
    assert work["health"] == "attention" and "takeover" in work["attention_reason"]
    assert [m["msg_id"] for m in queue_messages(conn, s.queue_a)] == [s.msg_a]  # the message stays
    assert_refused(conn, TAKE, (s.run_id, second.claim_id, s.queue_a, s.msg_a), SqlState.NOT_CLAIMABLE)

    receipt = v2.settle(conn, second.claim_id, "completed", {"late": True})  # allowed under attention
    assert receipt.verdict == "accepted"
    assert v2.settle(conn, first.claim_id, "completed", {"late": True}).verdict == "stale"
