"""The v1 cascade engine: start, claim, complete, fail with retries, delays, stalls, pruning."""

from __future__ import annotations

import threading
from uuid import UUID

import pytest

from evidence_lib.engine import v1
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.locks import wait_until_blocked
from evidence_lib.pg.db import Conn, connect
from tests.helpers import (
    archived_messages,
    assert_refused,
    define,
    queue_messages,
    run,
    scalar,
    step_state,
    task,
)


def all_ids(conn: Conn, queue: str) -> list[int]:
    return [m["msg_id"] for m in queue_messages(conn, queue)]


def test_start_flow_queues_roots_only(conn: Conn) -> None:
    define(conn, "shop", [("a", []), ("b", ["a"])])
    run_id = v1.start_flow(conn, "shop", {"order": 7})
    assert run(conn, run_id)["status"] == "started"
    assert task(conn, run_id, "a")["status"] == "queued"
    assert scalar(conn, "select count(*) from engine.step_tasks where step_slug = 'b'") == 0
    assert step_state(conn, run_id, "b")["status"] == "created"
    [msg] = queue_messages(conn, "shop")
    assert msg["message"] == {
        "protocol": "v1",
        "run_id": str(run_id),
        "step_slug": "a",
        "task_index": 0,
    }
    assert task(conn, run_id, "a")["message_id"] == msg["msg_id"]


def test_start_flow_of_an_unknown_flow_is_refused_with_dr014(conn: Conn) -> None:
    assert_refused(conn, "select engine.start_flow('nope', '{}')", None, SqlState.UNKNOWN_OBJECT, "nope")


def test_start_flow_with_sql_null_input_is_refused_with_dr009(conn: Conn) -> None:
    define(conn, "shop", [("a", [])])
    assert_refused(conn, "select engine.start_flow('shop', null)", None, SqlState.BAD_OUTCOME_OR_RESULT, "shop")


def test_start_tasks_grants_input_and_sets_vt_to_timeout_plus_2s(conn: Conn) -> None:
    define(conn, "shop", [("a", [])], timeout=60)
    conn.execute("select engine.add_step('shop', 'b', array['a'], timeout => 7)")
    run_id = v1.start_flow(conn, "shop", {"n": 1})
    [grant] = v1.start_tasks(conn, "shop", all_ids(conn, "shop"))
    assert (grant.run_id, grant.step_slug, grant.input) == (run_id, "a", {"n": 1})
    t = task(conn, run_id, "a")
    assert t["status"] == "started" and t["attempts_count"] == 1
    assert scalar(
        conn,
        "select vt = %s::timestamptz + interval '62 seconds' from pgmq.q_shop",
        (t["started_at"],),
    )
    # the dependent step uses its own effective timeout (7 s) and gets {"run", "a"} as input
    v1.complete_task(conn, run_id, "a", 0, {"a_out": True})
    [grant_b] = v1.start_tasks(conn, "shop", all_ids(conn, "shop"))
    assert grant_b.input == {"run": {"n": 1}, "a": {"a_out": True}}
    tb = task(conn, run_id, "b")
    vt_ok = scalar(
        conn,
        "select vt = %s::timestamptz + interval '9 seconds' from pgmq.q_shop where msg_id = %s",
        (tb["started_at"], tb["message_id"]),
    )
    assert vt_ok


def test_start_tasks_ignores_unknown_and_already_started_messages(conn: Conn) -> None:
    define(conn, "shop", [("a", [])])
    v1.start_flow(conn, "shop", {})
    ids = all_ids(conn, "shop")
    assert len(v1.start_tasks(conn, "shop", [*ids, 999_999])) == 1
    assert v1.start_tasks(conn, "shop", ids) == []


def test_two_sessions_claiming_one_message_get_one_winner(db_url: str) -> None:
    """Defect: a claim that returns rows from a pre-update snapshot grants one task twice."""
    with connect(db_url) as setup:
        define(setup, "shop", [("a", [])])
        v1.start_flow(setup, "shop", {})
        ids = all_ids(setup, "shop")
    with (
        connect(db_url, application_name="s1") as s1,
        connect(db_url, application_name="s2") as s2,
        connect(db_url, application_name="controller") as controller,
    ):
        s2_pid = scalar(s2, "select pg_backend_pid()")
        s1_pid = scalar(s1, "select pg_backend_pid()")
        s1.execute("begin")
        first = v1.start_tasks(s1, "shop", ids)  # holds the task row lock, uncommitted
        result: list[list[v1.TaskGrant]] = []
        t = threading.Thread(target=lambda: result.append(v1.start_tasks(s2, "shop", ids)))
        t.start()
        waits = wait_until_blocked(controller, s2_pid, by=s1_pid)  # proven, not assumed
        assert waits
        s1.execute("commit")
        t.join(timeout=10)
        assert len(first) == 1 and result == [[]]
        assert scalar(controller, "select attempts_count from engine.step_tasks") == 1


def test_complete_task_cascades_and_archives(conn: Conn) -> None:
    """Defect: a side effect in an unreferenced CTE never ran; here every effect is read back."""
    define(conn, "shop", [("a", []), ("b", ["a"]), ("c", ["a"]), ("d", ["b", "c"])])
    run_id = v1.start_flow(conn, "shop", {"x": 1})
    [ga] = v1.start_tasks(conn, "shop", all_ids(conn, "shop"))
    v1.complete_task(conn, run_id, "a", 0, 0)
    assert [m["msg_id"] for m in archived_messages(conn, "shop")] == [ga.message_id]
    assert {m["message"]["step_slug"] for m in queue_messages(conn, "shop")} == {"b", "c"}
    grants = {g.step_slug: g for g in v1.start_tasks(conn, "shop", all_ids(conn, "shop"))}
    assert set(grants) == {"b", "c"}
    v1.complete_task(conn, run_id, "b", 0, False)
    assert step_state(conn, run_id, "d")["remaining_deps"] == 1
    assert scalar(conn, "select count(*) from engine.step_tasks where step_slug = 'd'") == 0
    v1.complete_task(conn, run_id, "c", 0, "")
    [gd] = v1.start_tasks(conn, "shop", all_ids(conn, "shop"))
    assert gd.input == {"run": {"x": 1}, "b": False, "c": ""}
    v1.complete_task(conn, run_id, "d", 0, [])
    r = run(conn, run_id)
    assert r["status"] == "completed" and r["output"] == {"d": []} and r["remaining_steps"] == 0
    assert queue_messages(conn, "shop") == []
    assert len(archived_messages(conn, "shop")) == 4


@pytest.mark.parametrize(
    ("call", "sqlstate", "named"),
    [
        ("select engine.complete_task(gen_random_uuid(), 'a', 0, '1')", SqlState.UNKNOWN_OBJECT, ""),
        ("select engine.complete_task(%(run)s, 'zz', 0, '1')", SqlState.UNKNOWN_OBJECT, "zz"),
        ("select engine.complete_task(%(run)s, 'a', 0, null)", SqlState.BAD_OUTCOME_OR_RESULT, ""),
    ],
    ids=["an_unknown_run_is_dr014", "an_unknown_step_is_dr014", "an_sql_null_output_is_dr009"],
)
def test_a_bad_complete_task_is_refused(conn: Conn, call: str, sqlstate: SqlState, named: str) -> None:
    define(conn, "shop", [("a", [])])
    run_id = v1.start_flow(conn, "shop", {})
    assert_refused(conn, call, {"run": run_id}, sqlstate, *([named] if named else []))


def test_a_late_report_for_a_task_that_is_not_started_changes_nothing(conn: Conn) -> None:
    define(conn, "shop", [("a", [])])
    run_id = v1.start_flow(conn, "shop", {})
    assert v1.complete_task(conn, run_id, "a", 0, 1) == "queued"


def test_fail_task_retries_with_exponential_backoff(conn: Conn) -> None:
    """Defect: the retry delay lived in an unreferenced CTE and was never applied."""
    define(conn, "shop", [("a", [])], max_attempts=3, base_delay=5)
    run_id = v1.start_flow(conn, "shop", {})
    for attempt, delay in ((1, 5), (2, 10)):
        v1.start_tasks(conn, "shop", all_ids(conn, "shop"))
        assert v1.fail_task(conn, run_id, "a", 0, f"boom {attempt}") == "queued"
        t = task(conn, run_id, "a")
        assert t["attempts_count"] == attempt and t["error_message"] == f"boom {attempt}"
        assert scalar(
            conn,
            "select vt = %s::timestamptz + make_interval(secs => %s) from pgmq.q_shop",
            (t["queued_at"], delay),
        )
        conn.execute("select pgmq.set_vt('shop', %s, 0)", (t["message_id"],))  # time travel
    v1.start_tasks(conn, "shop", all_ids(conn, "shop"))
    assert v1.fail_task(conn, run_id, "a", 0, "boom 3") == "failed"
    assert run(conn, run_id)["status"] == "failed"
    assert step_state(conn, run_id, "a")["status"] == "failed"
    assert queue_messages(conn, "shop") == []


def test_failed_run_terminalizes_unfinished_sibling_tasks(conn: Conn) -> None:
    """Defect: failing a run left sibling tasks queued or started."""
    define(conn, "shop", [("a", []), ("b", []), ("c", []), ("d", ["a"])], max_attempts=1)
    run_id = v1.start_flow(conn, "shop", {})
    ids = all_ids(conn, "shop")
    v1.start_tasks(conn, "shop", ids[:2])  # a and b started, c still queued
    v1.fail_task(conn, run_id, "a", 0, "boom")
    states = dict(
        conn.execute("select step_slug, status from engine.step_tasks where run_id = %s", (run_id,)).fetchall()
    )
    assert states == {"a": "failed", "b": "cancelled", "c": "cancelled"}
    steps = dict(
        conn.execute("select step_slug, status from engine.step_states where run_id = %s", (run_id,)).fetchall()
    )
    assert steps == {"a": "failed", "b": "cancelled", "c": "cancelled", "d": "cancelled"}
    assert queue_messages(conn, "shop") == [] and len(archived_messages(conn, "shop")) == 3
    assert v1.complete_task(conn, run_id, "b", 0, 1) == "cancelled"  # a late report changes nothing


def test_start_delay_delays_the_first_message(conn: Conn) -> None:
    define(conn, "shop", [("a", [])])
    conn.execute("select engine.add_step('shop', 'b', array['a'], start_delay => 30)")
    run_id = v1.start_flow(conn, "shop", {})
    v1.start_tasks(conn, "shop", all_ids(conn, "shop"))
    v1.complete_task(conn, run_id, "a", 0, 1)
    tb = task(conn, run_id, "b")
    assert scalar(
        conn,
        "select vt = %s::timestamptz + interval '30 seconds' from pgmq.q_shop where msg_id = %s",
        (tb["queued_at"], tb["message_id"]),
    )


def _backdate(conn: Conn, run_id: UUID, seconds: int) -> None:
    conn.execute(
        "update engine.step_tasks set started_at = started_at - make_interval(secs => %s) where run_id = %s",
        (seconds, run_id),
    )


def test_requeue_stalled_tasks_uses_the_effective_step_timeout(conn: Conn) -> None:
    """Defect: stalled recovery used the flow timeout instead of the step's own."""
    define(conn, "shop", [("fast", [])], timeout=60)
    conn.execute("select engine.add_step('shop', 'slow', timeout => 5)")
    run_id = v1.start_flow(conn, "shop", {})
    v1.start_tasks(conn, "shop", all_ids(conn, "shop"))
    _backdate(conn, run_id, 8)  # past 5 + 2 s for 'slow', well within 60 + 2 s for 'fast'
    assert v1.requeue_stalled_tasks(conn) == 1
    assert task(conn, run_id, "slow")["status"] == "queued"
    assert task(conn, run_id, "fast")["status"] == "started"
    slow_msg = task(conn, run_id, "slow")["message_id"]
    assert scalar(conn, "select vt <= clock_timestamp() from pgmq.q_shop where msg_id = %s", (slow_msg,))
    assert v1.requeue_stalled_tasks(conn) == 0


def test_stalled_task_on_its_last_attempt_fails_the_run(conn: Conn) -> None:
    define(conn, "shop", [("a", []), ("b", [])], max_attempts=1, timeout=1)
    run_id = v1.start_flow(conn, "shop", {})
    v1.start_tasks(conn, "shop", all_ids(conn, "shop")[:1])
    _backdate(conn, run_id, 10)
    assert v1.requeue_stalled_tasks(conn) == 0
    assert run(conn, run_id)["status"] == "failed"
    assert task(conn, run_id, "a")["error_message"].startswith("stalled")
    assert task(conn, run_id, "b")["status"] == "cancelled"


def test_prune_removes_old_terminal_runs_and_archived_messages(conn: Conn) -> None:
    define(conn, "shop", [("a", [])])
    done = v1.start_flow(conn, "shop", {})
    v1.start_tasks(conn, "shop", all_ids(conn, "shop"))
    v1.complete_task(conn, done, "a", 0, 1)
    live = v1.start_flow(conn, "shop", {})
    assert v1.prune_data_older_than(conn, "1 hour") == 0  # too recent: kept
    assert len(archived_messages(conn, "shop")) == 1
    assert v1.prune_data_older_than(conn, "0 seconds") == 1
    assert scalar(conn, "select array_agg(run_id) from engine.runs") == [live]
    assert scalar(conn, "select count(*) from engine.step_tasks where run_id = %s", (done,)) == 0
    assert archived_messages(conn, "shop") == []
    assert len(queue_messages(conn, "shop")) == 1  # the live run's message is untouched
    assert_refused(conn, "select engine.prune_data_older_than(interval '-1 day')", None, SqlState.ARGUMENT_OUT_OF_RANGE)
    assert_refused(conn, "select engine.prune_data_older_than(null)", None, SqlState.ARGUMENT_OUT_OF_RANGE)
