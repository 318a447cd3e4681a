"""Queue identity and private per-step queues (CONTRACT section 1)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from evidence_lib.engine import v1
from evidence_lib.engine.flows import Flow, FlowMismatch, compile_flow, with_step_queues
from evidence_lib.engine.queues import step_queue_name
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.pg.db import Conn
from evidence_lib.workers.v1 import Worker
from tests.helpers import (
    archived_messages,
    assert_refused,
    define,
    queue_messages,
    run,
    scalar,
    task,
)

F47 = "f" * 40  # with "__" and a 5-character step: exactly 47


@pytest.mark.parametrize(
    ("flow", "step", "index", "expected"),
    [
        ("Orders", "Charge", 0, "orders__charge"),
        (F47, "abcde", 3, F47 + "__abcde"),  # exactly 47: kept
        (F47, "abcdef", 3, F47 + "__3"),  # 48: cut flow name + index suffix
        ("x" * 47, "step", 12, "x" * 43 + "__12"),
        ("a_b", "c", 0, "a_b__c"),
    ],
)
def test_private_queue_names_match_the_sql_algorithm(
    conn: Conn, flow: str, step: str, index: int, expected: str
) -> None:
    assert step_queue_name(flow, step, index) == expected
    assert scalar(conn, "select engine._step_queue_name(%s, %s, %s)", (flow, step, index)) == expected
    assert len(expected) <= 47
    conn.execute("select pgmq.validate_queue_name(%s)", (expected,))


def test_plain_flow_persists_routes_and_task_snapshots(conn: Conn) -> None:
    define(conn, "OrderFlow", [("Charge", []), ("Ship", ["Charge"])])
    assert conn.execute("select step_slug, queue_name from engine.steps order by step_index").fetchall() == [
        ("Charge", "orderflow"),
        ("Ship", "orderflow"),
    ]
    assert scalar(conn, "select flow_slug from engine.flows") == "OrderFlow"
    run_id = v1.start_flow(conn, "OrderFlow", {})
    t = task(conn, run_id, "Charge")
    [msg] = queue_messages(conn, "orderflow")
    assert (t["queue_name"], t["message_id"]) == ("orderflow", msg["msg_id"])


def test_step_queued_flow_creates_one_queue_per_step(conn: Conn) -> None:
    conn.execute("select engine.create_flow('Shop', queue_mode => 'step')")
    conn.execute("select engine.add_step('Shop', 'Fetch')")
    conn.execute("select engine.add_step('Shop', 'Rank', array['Fetch'])")
    routes = conn.execute("select step_slug, queue_name from engine.steps order by step_index").fetchall()
    assert routes == [("Fetch", "shop__fetch"), ("Rank", "shop__rank")]
    queues = {r[0] for r in conn.execute("select queue_name from pgmq.list_queues()").fetchall()}
    assert queues == {"shop__fetch", "shop__rank"}  # the default name is reserved, not created
    run_id = v1.start_flow(conn, "Shop", {"q": 1})
    assert task(conn, run_id, "Fetch")["queue_name"] == "shop__fetch"
    assert len(queue_messages(conn, "shop__fetch")) == 1 and queue_messages(conn, "shop__rank") == []


def test_default_queue_name_collisions_are_refused(conn: Conn) -> None:
    define(conn, "foo", [("a", [])])
    assert_refused(conn, "select engine.create_flow('Foo')", None, SqlState.QUEUE_COLLISION, "foo", "Foo")
    assert_refused(conn, "select engine.create_flow('FOO', queue_mode => 'step')", None, SqlState.QUEUE_COLLISION)
    conn.execute("select pgmq.create('someone_elses')")
    assert_refused(conn, "select engine.create_flow('Someone_Elses')", None, SqlState.QUEUE_COLLISION, "someone_elses")


def test_private_queue_collisions_are_refused_and_write_nothing(conn: Conn) -> None:
    conn.execute("select pgmq.create('shop__b')")  # held by another application
    conn.execute("select engine.create_flow('shop', queue_mode => 'step')")
    conn.execute("select engine.add_step('shop', 'a')")
    assert_refused(
        conn, "select engine.add_step('shop', 'b', array['a'])", None, SqlState.QUEUE_COLLISION, "shop__b", "shop"
    )
    # a plain flow whose default name equals an existing private route
    assert_refused(conn, "select engine.create_flow('shop__a')", None, SqlState.QUEUE_COLLISION, "shop__a", "shop")


def test_mode_or_options_mismatch_is_refused_without_destroying_anything(conn: Conn) -> None:
    conn.execute("select engine.create_flow('shop', queue_mode => 'step')")
    conn.execute("select engine.add_step('shop', 'a')")
    assert_refused(conn, "select engine.create_flow('shop')", None, SqlState.DEFINITION_DIFFERS, "shop")
    assert_refused(
        conn, "select engine.create_flow('shop', queue_mode => 'nope')", None, SqlState.UNSUPPORTED_DEFINITION
    )


def test_compile_refuses_a_mode_change(conn: Conn) -> None:
    flow: Flow[Any] = Flow("modal")
    flow.add("a", lambda x: x)
    compile_flow(conn, flow)
    before = scalar(conn, "select count(*) from pgmq.list_queues()")
    with pytest.raises(FlowMismatch, match="queue_mode=step"):
        compile_flow(conn, with_step_queues(flow))
    assert scalar(conn, "select count(*) from pgmq.list_queues()") == before
    assert compile_flow(conn, flow) is False


def test_delete_flow_drops_private_queues_only(conn: Conn) -> None:
    conn.execute("select engine.create_flow('shop', queue_mode => 'step')")
    conn.execute("select engine.add_step('shop', 'a')")
    v1.start_flow(conn, "shop", {})
    conn.execute("select pgmq.create('unrelated')")
    conn.execute("select engine.delete_flow('shop')")
    assert [r[0] for r in conn.execute("select queue_name from pgmq.list_queues()").fetchall()] == ["unrelated"]


def test_same_numeric_message_id_in_two_queues_never_matches(conn: Conn) -> None:
    define(conn, "left_q", [("a", [])])
    define(conn, "right_q", [("a", [])])
    left = v1.start_flow(conn, "left_q", {})
    right = v1.start_flow(conn, "right_q", {})
    mid = task(conn, left, "a")["message_id"]
    assert task(conn, right, "a")["message_id"] == mid  # both queues start at 1
    right_before = queue_messages(conn, "right_q")
    [grant] = v1.start_tasks(conn, "left_q", [mid])
    assert grant.run_id == left and grant.queue_name == "left_q"
    assert task(conn, right, "a")["status"] == "queued"
    assert queue_messages(conn, "right_q") == right_before  # vt untouched
    assert v1.start_tasks(conn, "no_such_queue", [mid]) == []


def test_message_ids_beyond_2_pow_53_stay_exact(conn: Conn, db_url: str) -> None:
    big = 2**53 + 1  # not representable as a float64
    flow: Flow[Any] = Flow("bigids")
    flow.add("a", lambda x: x).add("b", lambda x: x, deps=["a"])
    compile_flow(conn, flow)
    conn.execute(f"alter table pgmq.q_bigids alter column msg_id restart with {big}")  # test setup
    run_id = v1.start_flow(conn, "bigids", {"n": 1})
    assert task(conn, run_id, "a")["message_id"] == big
    with Worker(db_url, flow) as w:
        while w.poll(wait_for_handlers=True):
            pass
    assert run(conn, run_id)["status"] == "completed"
    assert [m["msg_id"] for m in archived_messages(conn, "bigids")] == [big, big + 1]
    assert scalar(conn, "select message_id::text from engine.step_tasks where step_slug = 'b'") == str(big + 1)


def test_step_workers_read_only_their_own_queue(conn: Conn, db_url: str, caplog: Any) -> None:
    flow: Flow[Any] = Flow("staged")
    flow.add("a", lambda x: {"a": x}).add("b", lambda x: "b-done", deps=["a"])
    staged = with_step_queues(flow)
    compile_flow(conn, staged)
    run_id = v1.start_flow(conn, "staged", {"n": 1})
    stray = scalar(
        conn,
        "select pgmq.send('staged__a', %s::jsonb)",
        (f'{{"protocol": "v1", "run_id": "{run_id}", "step_slug": "b", "task_index": 0}}',),
    )
    with (
        caplog.at_level(logging.WARNING),
        Worker(db_url, staged, "b") as wb,
        Worker(db_url, staged, "a") as wa,
    ):
        assert (wa.queue, wb.queue) == ("staged__a", "staged__b")
        assert wb.poll(wait_for_handlers=True) == 0  # nothing for b yet
        while wa.poll(wait_for_handlers=True):
            pass
        assert wb.poll(wait_for_handlers=True) == 1
    assert run(conn, run_id)["output"] == {"b": "b-done"}
    assert [m["msg_id"] for m in queue_messages(conn, "staged__a")] == [stray]  # left intact
    assert any(f"message {stray} in queue staged__a" in r.getMessage() for r in caplog.records)
