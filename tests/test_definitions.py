"""Definition functions: documented SQLSTATEs, no write on refusal, idempotent redefinition."""

from __future__ import annotations

import pytest

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.pg.db import Conn
from tests.helpers import assert_refused, define, scalar


@pytest.mark.parametrize(
    "slug",
    ["", "1abc", "has-dash", "has space", "ünïcode", "x" * 129],
)
def test_create_flow_rejects_invalid_slugs(conn: Conn, slug: str) -> None:
    assert_refused(conn, "select engine.create_flow(%s)", (slug,), SqlState.UNSUPPORTED_DEFINITION)


def test_create_flow_rejects_a_default_queue_name_over_47_characters(conn: Conn) -> None:
    slug = "f" * 48
    assert_refused(conn, "select engine.create_flow(%s)", (slug,), SqlState.UNSUPPORTED_DEFINITION, slug)
    conn.execute("select engine.create_flow(%s)", ("f" * 47,))


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"base_delay": -1},
        {"timeout": 0},
        {"max_attempts": None},
    ],
)
def test_create_flow_rejects_options_out_of_range(conn: Conn, options: dict[str, int]) -> None:
    args = ", ".join(f"{k} => %({k})s" for k in options)
    assert_refused(
        conn, f"select engine.create_flow('orders', {args})", options, SqlState.UNSUPPORTED_DEFINITION, "orders"
    )


def test_create_flow_keeps_slug_spelling(conn: Conn) -> None:
    conn.execute("select engine.create_flow('OrderFlow')")
    assert scalar(conn, "select flow_slug from engine.flows") == "OrderFlow"


def test_same_flow_again_is_a_no_op_and_different_options_are_refused(conn: Conn) -> None:
    first = scalar(conn, "select to_jsonb(engine.create_flow('orders', timeout => 30))")
    again = scalar(conn, "select to_jsonb(engine.create_flow('orders', timeout => 30))")
    assert first == again
    assert_refused(
        conn, "select engine.create_flow('orders', timeout => 31)", None, SqlState.DEFINITION_DIFFERS, "orders"
    )


def test_add_step_to_unknown_flow(conn: Conn) -> None:
    assert_refused(conn, "select engine.add_step('nope', 'a')", None, SqlState.UNKNOWN_OBJECT, "nope")


@pytest.mark.parametrize(
    ("step", "deps", "sqlstate", "named"),
    [
        ("bad-slug", [], SqlState.UNSUPPORTED_DEFINITION, "bad-slug"),
        ("run", [], SqlState.UNSUPPORTED_DEFINITION, "run"),
        ("b", ["missing"], SqlState.UNKNOWN_OBJECT, "missing"),
        ("b", ["b"], SqlState.UNSUPPORTED_DEFINITION, "b"),
        ("b", ["a", "a"], SqlState.UNSUPPORTED_DEFINITION, "b"),
        ("b", ["a", None], SqlState.UNSUPPORTED_DEFINITION, "b"),
    ],
    ids=[
        "an_invalid_slug_is_dr001",
        "the_reserved_slug_run_is_dr001",
        "an_unknown_dependency_is_dr014",
        "a_step_depending_on_itself_is_dr001",
        "a_duplicated_dependency_is_dr001",
        "a_null_dependency_is_dr001",
    ],
)
def test_add_step_refuses_a_bad_step_and_writes_nothing(
    conn: Conn, step: str, deps: list[str | None], sqlstate: str, named: str
) -> None:
    define(conn, "orders", [("a", [])])
    assert_refused(conn, "select engine.add_step('orders', %s, %s)", (step, deps), sqlstate, named)


@pytest.mark.parametrize("option", ["max_attempts => 0", "base_delay => -1", "timeout => 0", "start_delay => -1"])
def test_add_step_rejects_negative_options(conn: Conn, option: str) -> None:
    define(conn, "orders", [])
    assert_refused(
        conn, f"select engine.add_step('orders', 'a', {option})", None, SqlState.UNSUPPORTED_DEFINITION, "orders"
    )


def test_step_index_follows_add_order_and_redefinition_is_idempotent(conn: Conn) -> None:
    define(conn, "orders", [("z", []), ("a", ["z"]), ("m", ["z", "a"])])
    rows = conn.execute("select step_slug, step_index, deps_count from engine.steps order by step_index").fetchall()
    assert rows == [("z", 0, 0), ("a", 1, 1), ("m", 2, 2)]
    conn.execute("select engine.add_step('orders', 'm', array['a', 'z'])")  # same set, other order
    assert_refused(conn, "select engine.add_step('orders', 'm', array['z'])", None, SqlState.DEFINITION_DIFFERS, "m")
    assert_refused(
        conn, "select engine.add_step('orders', 'm', array['z','a'], timeout => 5)", None, SqlState.DEFINITION_DIFFERS
    )


def test_delete_flow_removes_runs_tasks_and_queue(conn: Conn) -> None:
    define(conn, "orders", [("a", [])])
    conn.execute("select engine.start_flow('orders', '{}')")
    conn.execute("select engine.delete_flow('orders')")
    for table in ("flows", "steps", "runs", "step_states", "step_tasks"):
        assert scalar(conn, f"select count(*) from engine.{table}") == 0, table
    assert scalar(conn, "select count(*) from pgmq.list_queues()") == 0
    assert_refused(conn, "select engine.delete_flow('orders')", None, SqlState.UNKNOWN_OBJECT, "orders")
