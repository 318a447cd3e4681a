"""Scenario 6, admission and isolation: every unsupported shape or option rejected with its
SQLSTATE and a zero-row diff of all engine and queue tables; a live-definition mismatch; v1
writers refused on v2 state; the definition lock; and a v1 run still completing next to v2.
"""

from __future__ import annotations

import json
from typing import Any

from evidence_lib.engine import v1, v2
from evidence_lib.engine.flows import Flow, QueueMode, compile_flow, route
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.snapshots import attempt, diff, snapshot
from evidence_lib.pg.db import Conn, connect, one
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios import admission_claims, admission_v1
from evidence_lib.scenarios.support import consistency
from evidence_lib.scenarios.support.parts import PartSpec, candidate_databases, modeless, run_parts, single_database
from evidence_lib.scenarios.support.setup import modes, scenario_server
from evidence_lib.workers.v1 import Worker

SCENARIO = "06_admission"

START = "select engine.v2_start_run(%s, %s::jsonb)"
# (case, definition statements, input, expected SQLSTATE)
SHAPES: list[tuple[str, list[str], Any, str]] = [
    ("one step", ["create_flow('s1', max_attempts => 1)", "add_step('s1', 'A')"], {}, SqlState.UNSUPPORTED_DEFINITION),
    (
        "three steps",
        [
            "create_flow('s3', max_attempts => 1)",
            "add_step('s3', 'A')",
            "add_step('s3', 'B', array['A'])",
            "add_step('s3', 'C', array['B'])",
        ],
        {},
        SqlState.UNSUPPORTED_DEFINITION,
    ),
    (
        "two roots",
        ["create_flow('r2', max_attempts => 1)", "add_step('r2', 'A')", "add_step('r2', 'B')"],
        {},
        SqlState.UNSUPPORTED_DEFINITION,
    ),
    (
        "flow max_attempts 3",
        ["create_flow('m3')", "add_step('m3', 'A')", "add_step('m3', 'B', array['A'])"],
        {},
        SqlState.UNSUPPORTED_DEFINITION,
    ),
    (
        "step max_attempts 2",
        [
            "create_flow('m2', max_attempts => 1)",
            "add_step('m2', 'A')",
            "add_step('m2', 'B', array['A'], max_attempts => 2)",
        ],
        {},
        SqlState.UNSUPPORTED_DEFINITION,
    ),
    (
        "timeout 901 s",
        [
            "create_flow('t9', max_attempts => 1, timeout => 901)",
            "add_step('t9', 'A')",
            "add_step('t9', 'B', array['A'])",
        ],
        {},
        SqlState.UNSUPPORTED_DEFINITION,
    ),
    (
        "A start_delay 1 s",
        [
            "create_flow('da', max_attempts => 1)",
            "add_step('da', 'A', start_delay => 1)",
            "add_step('da', 'B', array['A'])",
        ],
        {},
        SqlState.UNSUPPORTED_DEFINITION,
    ),
    (
        "B start_delay 3601 s",
        [
            "create_flow('db', max_attempts => 1)",
            "add_step('db', 'A')",
            "add_step('db', 'B', array['A'], start_delay => 3601)",
        ],
        {},
        SqlState.UNSUPPORTED_DEFINITION,
    ),
    (
        "input 65 537 bytes",
        ["create_flow('big', max_attempts => 1)", "add_step('big', 'A')", "add_step('big', 'B', array['A'])"],
        "x" * 65535,
        SqlState.PAYLOAD_TOO_LARGE,
    ),
    (
        "input SQL NULL",
        ["create_flow('nul', max_attempts => 1)", "add_step('nul', 'A')", "add_step('nul', 'B', array['A'])"],
        None,
        SqlState.BAD_OUTCOME_OR_RESULT,
    ),
    ("unknown flow", [], {}, SqlState.UNKNOWN_OBJECT),
]


def run(queue_modes: str = "flow,step", database_url: str = "", hooks: str = "") -> ScenarioResult:
    result = ScenarioResult(SCENARIO, "Admission and isolation", {"queue_modes": queue_modes, "hooks": hooks})
    with (
        result.capture_logs(),
        scenario_server(database_url) as server,
        candidate_databases(server, hooks=hooks) as databases,
    ):
        run_parts(result, PARTS, databases, modes(queue_modes))
    consistency.gates(result)
    return result


def _refusal_row(conn: Conn, case: str, call: str, params: Any, expected: str) -> dict[str, Any]:
    outcome = attempt(conn, call, params)
    return {
        "case": case,
        "call": call.split("(")[0].replace("select ", "").replace("* from ", ""),
        "expected": expected,
        "sqlstate": outcome.sqlstate,
        "message": outcome.message,
        "rows_changed": outcome.changed_rows,
        "tables_changed": ", ".join(outcome.changed),
        "ok": outcome.sqlstate == expected and not outcome.changed,
    }


def _admission(result: ScenarioResult, url: str) -> None:
    table = []
    with connect(url) as conn:
        for case, statements, payload, expected in SHAPES:
            slug = statements[0].split("'")[1] if statements else "no_such_flow"
            for statement in statements:
                conn.execute(f"select engine.{statement}")
            params = (slug, None if payload is None else json.dumps(payload))
            table.append(_refusal_row(conn, case, START, params, expected))
        runs = one(conn, "select count(*) from engine.runs")
    result.table("admission_refusals", table)
    for row in table:
        result.gate(
            f"{'ignored' if row['expected'] == 'ignored' else 'refused'}: {row['case']}",
            row["ok"],
            f"[{row['sqlstate']}] {row['message']} (expected {row['expected']}); rows changed {row['rows_changed']}",
        )
    result.gate("no_run_exists_after_the_refusals", runs == 0, f"{runs} runs in the database")


def _isolation(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    table = []
    with connect(url) as conn:
        flow = define_ab(conn, "iso", mode)
        run_id = v2.start_run(conn, "iso", {"n": 1})
        msg = read_step_message(conn, flow, "A", run_id)
        grant = v2.claim(conn, run_id, "A", route(flow, "A"), msg)
        assert grant is not None
        for case, call, expected in [
            ("complete_task on a v2 task", "select engine.complete_task(%s, 'A', 0, '1')", SqlState.V1_WRITER_ON_V2),
            ("fail_task on a v2 task", "select engine.fail_task(%s, 'A', 0, 'x')", SqlState.V1_WRITER_ON_V2),
            ("v2_reconcile with max_actions 0", "select engine.v2_reconcile(%s, 0)", SqlState.ARGUMENT_OUT_OF_RANGE),
            (
                "v2_take_over before the lease horizon",
                "select * from engine.v2_take_over(%s, 'A', "
                + f"'{grant.claim_id}', '{route(flow, 'A')}', array[{msg}]::bigint[])",
                SqlState.TAKEOVER_BEFORE_HORIZON,
            ),
            (
                "v2_settle with an unknown outcome",
                f"select engine.v2_settle('{grant.claim_id}', 'done', '1') where %s is not null",
                SqlState.BAD_OUTCOME_OR_RESULT,
            ),
            (
                "v2_settle with a result over 262 144 bytes",
                f"select engine.v2_settle('{grant.claim_id}', 'completed', to_jsonb(repeat('x', 262143))) "
                "where %s is not null",
                SqlState.PAYLOAD_TOO_LARGE,
            ),
        ]:
            table.append(_refusal_row(conn, case, call, (run_id,), expected))
        for case, call, expected in [
            (
                "add a step while a v2 run is active",
                "select engine.add_step('iso', 'C', array['B'])",
                SqlState.DEFINITION_LOCKED,
            ),
            (
                "change options while a v2 run is active",
                "select engine.create_flow('iso', max_attempts => 1, timeout => 5)",
                SqlState.DEFINITION_LOCKED,
            ),
            (
                "delete the flow while a v2 run is active",
                "select engine.delete_flow('iso')",
                SqlState.DEFINITION_LOCKED,
            ),
        ]:
            table.append(_refusal_row(conn, case, call, None, expected))
        before = snapshot(conn)
        ignored = v1.start_tasks(conn, route(flow, "A"), [msg]), v1.requeue_stalled_tasks(conn)
        unchanged = diff(before, snapshot(conn)) == {}
        table.append(
            {
                "case": "start_tasks / requeue_stalled_tasks on v2 rows",
                "call": "start_tasks, requeue",
                "expected": "ignored",
                "sqlstate": None,
                "message": f"grants {len(ignored[0])}, requeued {ignored[1]}",
                "rows_changed": 0 if unchanged else -1,
                "tables_changed": "",
                "ok": unchanged and not ignored[0] and ignored[1] == 0,
            }
        )
        conn.execute(
            "update engine.steps set timeout = 7 where flow_slug = 'iso' and step_slug = 'B'"
        )  # behind its back
        table.append(
            _refusal_row(
                conn,
                "live definition changed behind the engine's back",
                "select engine.v2_reconcile(%s)",
                (run_id,),
                SqlState.DEFINITION_CHANGED,
            )
        )
        conn.execute("update engine.steps set timeout = null where flow_slug = 'iso' and step_slug = 'B'")
        classic: Flow[Any] = Flow("classic")
        classic.add("a", lambda x: {"a": x}).add("b", lambda x: "b done", deps=["a"])
        compile_flow(conn, classic)
        v1_run = v1.start_flow(conn, "classic", {"v": 1})
        with Worker(url, classic) as w:
            while w.poll(wait_for_handlers=True):
                pass
        v1_status = one(conn, "select status from engine.runs where run_id = %s", (v1_run,))
        v2_status = one(conn, "select status from engine.runs where run_id = %s", (run_id,))
    result.append_rows("isolation_refusals", [r | {"mode": mode} for r in table])
    for row in table:
        result.gate(
            f"{'ignored' if row['expected'] == 'ignored' else 'refused'}: {row['case']}",
            row["ok"],
            f"[{row['sqlstate']}] {row['message']} (expected {row['expected']}); rows changed {row['rows_changed']}",
            mode,
        )
    result.gate(
        "a_v1_run_still_completes_next_to_v2",
        v1_status == "completed" and v2_status == "started",
        f"v1 run {v1_status}; the v2 run is untouched ({v2_status})",
        mode,
    )


PARTS = [
    PartSpec("admission", modeless(_admission), per_mode=False),
    PartSpec("isolation", single_database(_isolation)),
    PartSpec("claim_eligibility", single_database(admission_claims.eligibility)),
    PartSpec("settlement_verdicts", single_database(admission_claims.verdicts)),
    PartSpec("stale_verdict", single_database(admission_claims.stale_verdict)),
    PartSpec("v1_one_winner", single_database(admission_v1.one_winner)),
    PartSpec("v1_retry_delay", single_database(admission_v1.retry_delay)),
    PartSpec("v1_siblings", single_database(admission_v1.siblings)),
]
