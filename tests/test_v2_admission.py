"""v2_start_run: what a start commits, and every unsupported shape, option or size refused with
its SQLSTATE and a zero-row diff of every engine table and every PGMQ queue and archive."""

from __future__ import annotations

import json

import pytest

from evidence_lib.engine import v2
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.ab_flow import define_ab
from evidence_lib.pg.db import Conn, rows
from tests.helpers import assert_refused, define, queue_messages, scalar


@pytest.mark.parametrize("mode", ["flow", "step"])
def test_start_commits_a_task_message_and_work_and_nothing_for_b(conn: Conn, mode: str) -> None:
    define_ab(conn, "ab", mode)  # type: ignore[arg-type]
    run_id = v2.start_run(conn, "ab", {"n": 1})
    run = rows(conn, "select protocol, status, definition_hash from engine.runs")[0]
    assert run["protocol"] == "v2" and run["status"] == "started" and len(run["definition_hash"]) == 32
    assert v2.work_row(conn, run_id) | {"run_id": None} == {
        "run_id": None,
        "requested_generation": 0,
        "processed_generation": 0,
        "health": "clean",
        "consecutive_errors": 0,
        "next_attempt_at": None,
        "attention_reason": None,
    }
    states = dict(conn.execute("select step_slug, status from engine.step_states").fetchall())
    assert states == {"A": "started", "B": "created"}
    tasks = rows(conn, "select step_slug, status, queue_name, message_id from engine.step_tasks")
    queue_a = "ab" if mode == "flow" else "ab__a"
    [msg] = queue_messages(conn, queue_a)
    assert tasks == [{"step_slug": "A", "status": "queued", "queue_name": queue_a, "message_id": msg["msg_id"]}]
    assert msg["message"] == {"protocol": "v2", "run_id": str(run_id), "step_slug": "A", "task_index": 0}
    if mode == "step":
        assert queue_messages(conn, "ab__b") == []


def _flow(conn: Conn, steps: list[tuple[str, list[str]]], **options: object) -> None:
    define(conn, "bad", steps, **({"max_attempts": 1} | options))


@pytest.mark.parametrize(
    ("case", "build", "input_", "sqlstate"),
    [
        ("one step", lambda c: _flow(c, [("A", [])]), {}, SqlState.UNSUPPORTED_DEFINITION),
        (
            "three steps",
            lambda c: _flow(c, [("A", []), ("B", ["A"]), ("C", ["B"])]),
            {},
            SqlState.UNSUPPORTED_DEFINITION,
        ),
        ("two roots", lambda c: _flow(c, [("A", []), ("B", [])]), {}, SqlState.UNSUPPORTED_DEFINITION),
        (
            "max_attempts 3",
            lambda c: _flow(c, [("A", []), ("B", ["A"])], max_attempts=3),
            {},
            SqlState.UNSUPPORTED_DEFINITION,
        ),
        (
            "step max_attempts 2",
            lambda c: (
                _flow(c, [("A", [])]),
                c.execute("select engine.add_step('bad', 'B', array['A'], max_attempts => 2)"),
            ),
            {},
            SqlState.UNSUPPORTED_DEFINITION,
        ),
        (
            "timeout 901",
            lambda c: _flow(c, [("A", []), ("B", ["A"])], timeout=901),
            {},
            SqlState.UNSUPPORTED_DEFINITION,
        ),
        (
            "A start_delay 1",
            lambda c: (
                _flow(c, []),
                c.execute("select engine.add_step('bad', 'A', start_delay => 1)"),
                c.execute("select engine.add_step('bad', 'B', array['A'])"),
            ),
            {},
            SqlState.UNSUPPORTED_DEFINITION,
        ),
        (
            "B start_delay 3601",
            lambda c: (
                _flow(c, [("A", [])]),
                c.execute("select engine.add_step('bad', 'B', array['A'], start_delay => 3601)"),
            ),
            {},
            SqlState.UNSUPPORTED_DEFINITION,
        ),
        (
            "input over 65536 bytes",
            lambda c: _flow(c, [("A", []), ("B", ["A"])]),
            "x" * 65535,
            SqlState.PAYLOAD_TOO_LARGE,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "",
)
def test_unsupported_shapes_options_and_sizes_write_nothing(
    conn: Conn, case: str, build: object, input_: object, sqlstate: str
) -> None:
    build(conn)  # type: ignore[operator]
    refusal = assert_refused(
        conn, "select engine.v2_start_run('bad', %s::jsonb)", (json.dumps(input_),), sqlstate, "bad"
    )
    assert refusal.changed_rows == 0


def test_limits_are_inclusive(conn: Conn) -> None:
    _flow(conn, [("A", [])], timeout=900)
    conn.execute("select engine.add_step('bad', 'B', array['A'], start_delay => 3600)")
    exact = "x" * 65534  # the JSON string with its quotes is 65 536 bytes
    assert scalar(conn, "select octet_length(%s::jsonb::text)", (json.dumps(exact),)) == 65536
    v2.start_run(conn, "bad", exact)


def test_unknown_flow_and_null_input(conn: Conn) -> None:
    assert_refused(conn, "select engine.v2_start_run('nope', '{}')", None, SqlState.UNKNOWN_OBJECT, "nope")
    define_ab(conn, "ab")
    assert_refused(conn, "select engine.v2_start_run('ab', null)", None, SqlState.BAD_OUTCOME_OR_RESULT, "ab")
