"""Isolation from v1 (DR010), the definition lock (DR011), pruning, and inert hooks."""

from __future__ import annotations

import pytest

from evidence_lib.engine import v1, v2
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.snapshots import attempt, diff, snapshot
from evidence_lib.pg.db import Conn
from tests.helpers import assert_refused, define, queue_messages, scalar
from tests.v2_helpers import claim_a, start, through_b_claim


def test_v1_writers_refuse_or_ignore_v2_rows(conn: Conn) -> None:
    s = start(conn)
    claim_a(conn, s)
    for call in (
        "select engine.complete_task(%s, 'A', 0, '1')",
        "select engine.fail_task(%s, 'A', 0, 'boom')",
    ):
        assert_refused(conn, call, (s.run_id,), SqlState.V1_WRITER_ON_V2, str(s.run_id))
    conn.execute("update engine.step_tasks set started_at = started_at - interval '1 hour'")  # stale
    before = snapshot(conn)
    assert v1.start_tasks(conn, s.queue_a, [s.msg_a]) == []
    assert v1.requeue_stalled_tasks(conn) == 0
    assert v1.prune_data_older_than(conn, "0 seconds") == 0
    assert diff(before, snapshot(conn)) == {}


def test_a_v1_run_still_completes_next_to_v2(conn: Conn) -> None:
    s = start(conn)
    define(conn, "classic", [("a", []), ("b", ["a"])])
    v1_run = v1.start_flow(conn, "classic", {"v": 1})
    v1_same_flow = v1.start_flow(conn, "ab", {"v": 1})  # v1 on the v2 flow's definition
    for run_id, queue in ((v1_run, "classic"), (v1_same_flow, "ab")):
        while True:
            ids = [
                m["msg_id"]
                for m in queue_messages(conn, queue)
                if m["message"]["protocol"] == "v1" and m["message"]["run_id"] == str(run_id)
            ]
            grants = v1.start_tasks(conn, queue, ids)
            if not grants:
                break
            for g in grants:
                v1.complete_task(conn, g.run_id, g.step_slug, 0, g.step_slug)
        assert scalar(conn, "select status from engine.runs where run_id = %s", (run_id,)) == "completed"
    assert scalar(conn, "select status from engine.runs where run_id = %s", (s.run_id,)) == "started"


@pytest.mark.parametrize(
    "change",
    [
        "select engine.add_step('ab', 'C', array['B'])",
        "select engine.add_step('ab', 'B', array['A'], timeout => 5)",
        "select engine.create_flow('ab', max_attempts => 1, timeout => 31)",
        "select engine.delete_flow('ab')",
    ],
    ids=["new step", "step options", "flow options", "delete"],
)
def test_a_flow_with_an_active_v2_run_cannot_change(conn: Conn, change: str) -> None:
    s = start(conn)
    assert_refused(conn, change, None, SqlState.DEFINITION_LOCKED, "ab")
    conn.execute("select engine.add_step('ab', 'A')")  # an identical definition is still a no-op
    grant = claim_a(conn, s)
    v2.settle(conn, grant.claim_id, "failed", {"e": 1})  # the run is terminal now
    refusal = attempt(conn, change)
    assert refusal.sqlstate in (None, SqlState.DEFINITION_DIFFERS), refusal  # no longer locked: applied, or DR016


def test_pruning_removes_terminal_v2_runs_with_their_history(conn: Conn) -> None:
    s = start(conn)
    b = through_b_claim(conn, s)
    v2.settle(conn, b.claim_id, "completed", "b")
    v2.reconcile(conn, s.run_id)
    live = start(conn, slug="live")
    assert v1.prune_data_older_than(conn, "0 seconds") == 1
    for table in ("runs", "run_work", "task_claims", "task_settlements", "step_tasks"):
        assert scalar(conn, f"select count(*) from engine.{table} where run_id = %s", (s.run_id,)) == 0
    assert scalar(conn, "select count(*) from engine.run_work where run_id = %s", (live.run_id,)) == 1


def test_an_unarmed_hook_changes_nothing(conn: Conn) -> None:
    start(conn)
    pid = scalar(conn, "select pg_backend_pid()")
    for setting in (None, "", "some.other.point", "claim.after_run:fail,settle.after_run_lock"):
        if setting is not None:
            conn.execute("select set_config('engine.hooks', %s, false)", (setting,))
        before = snapshot(conn)
        conn.execute("select engine._hook('claim.after_run_lock')")
        assert diff(before, snapshot(conn)) == {}
        assert scalar(conn, "select count(*) from pg_locks where locktype = 'advisory' and pid = %s", (pid,)) == 0
    conn.execute("set engine.hooks = 'reconcile.action:fail'")
    assert_refused(conn, "select engine._hook('reconcile.action')", None, SqlState.HOOK_FAILED, "reconcile.action")
