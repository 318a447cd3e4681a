"""Scenario 5, queue identity and private queues: the naming algorithm on long and colliding
names, the same numeric message id in two queues never cross-claimed, ids beyond 2^53 exact end
to end, unknown messages left intact, step selectors, the upgrade of a populated baseline
database to the candidate migration, and a new-constraint violation rolling it back whole.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from evidence_lib.engine import v1, v2
from evidence_lib.engine.flows import AnyFlow, Flow, compile_flow, route, with_step_queues
from evidence_lib.engine.queues import step_queue_name
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.snapshots import attempt, diff, snapshot
from evidence_lib.harness.waits import bounded
from evidence_lib.pg import db, migrate
from evidence_lib.pg.db import Server, connect, one, rows
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.queue_identity_races import concurrent_definitions
from evidence_lib.scenarios.support import consistency
from evidence_lib.scenarios.support.parts import PartSpec, candidate_databases, modeless, run_parts
from evidence_lib.scenarios.support.setup import scenario_server
from evidence_lib.workers.config import StepSelectorError, WorkerConfig
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.v1 import Worker
from evidence_lib.workers.v2 import V2Worker

SCENARIO = "05_queue_identity"
BASELINE = "0001_baseline.sql"
NAMES = [
    ("Orders", "Charge", 0),
    ("f" * 40, "abcde", 3),
    ("f" * 40, "abcdef", 3),
    ("community_threads_moderation_pipeline", "classify_with_model", 1),
    ("a__b", "c", 0),
    ("a", "b__c", 1),
]


def run(database_url: str = "", hooks: str = "") -> ScenarioResult:
    result = ScenarioResult(SCENARIO, "Queue identity and private queues", {"hooks": hooks})
    with (
        result.capture_logs(),
        scenario_server(database_url) as server,
        candidate_databases(server, hooks=hooks) as databases,
    ):
        run_parts(result, PARTS, databases, [])
        for name, fn in (("upgrade", _upgrade), ("rollback", _rollback)):
            try:
                fn(result, server)
            except Exception as exc:
                result.gate(f"{name}_ran_to_the_end", False, f"{type(exc).__name__}: {exc}")
    consistency.gates(result)
    return result


def _naming(result: ScenarioResult, url: str) -> None:
    with connect(url) as conn:
        table = []
        for flow, step, index in NAMES:
            name = step_queue_name(flow, step, index)
            table.append(
                {
                    "flow_slug": flow,
                    "step_slug": step,
                    "step_index": index,
                    "queue_name": name,
                    "length": len(name),
                    "sql_agrees": one(conn, "select engine._step_queue_name(%s, %s, %s)", (flow, step, index)) == name,
                }
            )
        result.table("naming", table)
        result.gate(
            "python_and_sql_names_agree_within_47",
            all(r["sql_agrees"] and r["length"] <= 47 for r in table),
            f"{len(table)} examples incl. exactly 47 and a 48 cut to '__<index>'",
        )
        conn.execute("select engine.create_flow('a__b', queue_mode => 'step')")
        conn.execute("select engine.add_step('a__b', 'c')")
        conn.execute("select engine.create_flow('a', queue_mode => 'step')")
        conn.execute("select engine.add_step('a', 'x')")
        refusal = attempt(conn, "select engine.add_step('a', 'b__c', array['x'])")
        result.gate(
            "colliding_private_name_refused_without_writes",
            refusal.sqlstate == SqlState.QUEUE_COLLISION and not refusal.changed,
            f"[{refusal.sqlstate}] {refusal.message}; rows changed {refusal.changed_rows}",
        )
        conn.execute("select engine.create_flow('Orders')")
        conn.execute("select engine.create_flow('invoices')")
        refusals = [
            attempt(conn, "select engine.create_flow('orders')"),  # lower-case after a capital
            attempt(conn, "select engine.create_flow('Invoices')"),  # a capital after lower-case
        ]
        result.gate(
            "colliding_default_name_refused_without_writes",
            all(r.sqlstate == SqlState.QUEUE_COLLISION and not r.changed for r in refusals),
            "; ".join(f"[{r.sqlstate}] {r.message}" for r in refusals),
        )


def _identity(result: ScenarioResult, url: str) -> None:
    with connect(url) as conn:
        left, right = define_ab(conn, "left_q", "step"), define_ab(conn, "right_q", "step")
        run_l, run_r = v2.start_run(conn, "left_q", {}), v2.start_run(conn, "right_q", {})
        msg_l, msg_r = read_step_message(conn, left, "A", run_l), read_step_message(conn, right, "A", run_r)
        refusal = attempt(
            conn,
            "select * from engine.v2_claim(%s, 'A', %s, array[%s]::bigint[])",
            (run_l, route(right, "A"), msg_r),
        )
        v1_grants = v1.start_tasks(conn, route(right, "A"), [msg_l])
        result.table(
            "same_numeric_id",
            [
                {
                    "left_queue": route(left, "A"),
                    "left_message": msg_l,
                    "right_queue": route(right, "A"),
                    "right_message": msg_r,
                    "v2_claim_with_other_queue": refusal.sqlstate,
                    "rows_changed": refusal.changed_rows,
                    "v1_grants": len(v1_grants),
                }
            ],
        )
        result.gate(
            "same_numeric_id_never_cross_claimed",
            msg_l == msg_r and refusal.sqlstate == SqlState.IDENTITY_MISMATCH and not refusal.changed and not v1_grants,
            f"both queues hold message {msg_l}; cross claim: [{refusal.sqlstate}], no write, v1: no grant",
        )


POLL_BOUND = 3.0  # seconds one poll may take, its handlers and settlements included (milliseconds here)


def _big_ids(result: ScenarioResult, url: str) -> None:
    big = 2**53 + 1
    with connect(url) as conn:
        flow = define_ab(conn, "big", "step")
        conn.execute(f"alter table pgmq.q_big__a alter column msg_id restart with {big}")  # setup only
        conn.execute(f"alter table pgmq.q_big__b alter column msg_id restart with {big + 2}")
        run_id = v2.start_run(conn, "big", {"x": 1})
        quick = WorkerConfig(shutdown_grace=1.0)  # a handler stuck in a broken worker is not waited for
        with V2Worker.serving(url, flow, "A", config=quick) as wa, V2Worker.serving(url, flow, "B", config=quick) as wb:
            bounded(lambda: wa.poll(wait_for_handlers=True), POLL_BOUND, "worker A's poll")
            Reconciler(url).drain()
            bounded(lambda: wb.poll(wait_for_handlers=True), POLL_BOUND, "worker B's poll")
            Reconciler(url).drain()
        seen = [s.claim_id for s in wa.stats.settlements + wb.stats.settlements]
        ids = rows(
            conn,
            "select step_slug, message_id::text as message_id from engine.task_claims "
            "where run_id = %s order by step_slug",
            (run_id,),
        )
        result.table("big_ids", ids)
        exact = [r["message_id"] for r in ids] == [str(big), str(big + 2)]
        result.gate(
            "ids_beyond_2_pow_53_exact_end_to_end",
            exact and len(seen) == 2 and one(conn, "select status from engine.runs") == "completed",
            f"message ids {[r['message_id'] for r in ids]} (2^53 + 1 = {big}); run completed",
        )


def _unknown_messages(result: ScenarioResult, url: str) -> None:
    with connect(url) as conn:
        flow = define_ab(conn, "intact", "step")
        bodies = [
            '"plain text"',
            '{"protocol": "v1", "run_id": "6f1c4c1e-0000-4000-8000-000000000000", "step_slug": "A", "task_index": 0}',
            '{"protocol": "v2", "run_id": "6f1c4c1e-0000-4000-8000-000000000000", "step_slug": "A", "task_index": 0}',
            '{"hello": "world"}',
        ]
        for body in bodies:
            conn.execute("select pgmq.send('intact__a', %s::jsonb)", (body,))
        before = snapshot(conn)
        with V2Worker.serving(url, flow, "A") as w:
            while w.poll(wait_for_handlers=True):
                pass
        changed = diff(before, snapshot(conn))
        moved = {k: v for k, v in changed.items() if k != "pgmq.q_intact__a"}
        vt_only = all(len(d.added) == len(d.removed) for d in changed.values())
        left = one(conn, "select count(*) from pgmq.q_intact__a")
        warned = [line for line in result.log_lines if "left intact" in line]
        result.gate(
            "unknown_messages_left_intact",
            left == len(bodies) and not moved and vt_only and len(warned) >= len(bodies),
            f"{left}/{len(bodies)} still queued, none archived or deleted (only the read's vt changed); "
            f"{len(warned)} warnings name queue and id",
        )


def _selectors(result: ScenarioResult, url: str) -> None:
    plain: Flow[Any] = Flow("sel", max_attempts=1)
    plain.add("A", lambda x: x).add("B", lambda x: x, deps=["A"])
    stepped = with_step_queues(plain)
    cases: list[tuple[str, AnyFlow, str | None]] = [
        ("plain flow, no step", plain, None),
        ("plain flow, step A", plain, "A"),
        ("step queues, no step", stepped, None),
        ("step queues, step Z", stepped, "Z"),
        ("step queues, step B", stepped, "B"),
    ]
    table = []
    for label, flow, step in cases:
        try:
            w = Worker.serving("dbname=never_contacted", flow, step)
            table.append({"case": label, "outcome": f"reads {w.queue}"})
        except StepSelectorError as exc:
            table.append({"case": label, "outcome": f"StepSelectorError: {exc}"})
    result.table("step_selectors", table)
    expected = ["reads sel", "StepSelectorError", "StepSelectorError", "StepSelectorError", "reads sel__b"]
    result.gate(
        "step_selectors_checked_before_database_work",
        all(r["outcome"].startswith(e) for r, e in zip(table, expected, strict=True)),
        "; ".join(f"{r['case']}: {r['outcome'].split(':')[0]}" for r in table),
    )
    with connect(url) as conn:
        compile_flow(conn, plain)
        refusal = attempt(conn, "select engine.create_flow('sel', max_attempts => 1, queue_mode => 'step')")
        result.gate(
            "mode_change_refused_without_destroying",
            refusal.sqlstate == SqlState.DEFINITION_DIFFERS and not refusal.changed,
            f"[{refusal.sqlstate}] {refusal.message}",
        )


def _baseline_db(server: Server) -> Any:
    return db.scratch_database(server, prefix="upgrade")


def _upgrade(result: ScenarioResult, server: Server) -> None:
    with _baseline_db(server) as url:
        migrate.apply_migrations(url, upto=BASELINE)
        with connect(url) as conn:
            conn.execute("select engine.create_flow('Shop', base_delay => 0)")
            conn.execute("select engine.add_step('Shop', 'a')")
            conn.execute("select engine.add_step('Shop', 'b', array['a'])")
            runs = [v1.start_flow(conn, "Shop", {"i": i}) for i in range(3)]
            ids = [one(conn, "select message_id from engine.step_tasks where run_id = %s", (r,)) for r in runs[1:]]
            grants = v1.start_tasks(conn, "Shop", ids)
            v1.complete_task(conn, runs[2], "a", 0, {"a": 1})
            before = rows(
                conn,
                "select r.run_id, t.step_slug, t.status, t.message_id from engine.runs r "
                "join engine.step_tasks t using (run_id) order by 1, 2",
            )
        applied = migrate.apply_migrations(url)
        with connect(url) as conn:
            after = rows(
                conn,
                "select run_id, step_slug, status, queue_name, message_id from engine.step_tasks order by 1, 2",
            )
            result.table("upgrade_tasks_before", before)
            result.table("upgrade_tasks_after", after)
            v1.complete_task(conn, runs[1], "a", 0, {"a": 2})  # reported by an old worker
            flow: Flow[Any] = Flow("Shop", base_delay=0)
            flow.add("a", lambda x: {"a": 3}).add("b", lambda x: "b", deps=["a"])
            with Worker(url, flow) as w:
                while w.poll(wait_for_handlers=True):
                    pass
            statuses = [one(conn, "select status from engine.runs where run_id = %s", (r,)) for r in runs]
        result.gate(
            "populated_baseline_upgrades_to_the_candidate",
            applied[-1] == migrate.candidate_artifact().name
            and all(r["queue_name"] == "shop" for r in after)
            and [r["message_id"] for r in after if r["step_slug"] == "a"]
            == [r["message_id"] for r in before if r["step_slug"] == "a"],
            f"applied {applied}; {len(after)} task snapshots = lower(flow slug), message ids kept; "
            f"{len(grants)} in-flight claims",
        )
        result.gate("in_flight_v1_runs_finish_after_the_upgrade", statuses == ["completed"] * 3, f"runs {statuses}")


def _rollback(result: ScenarioResult, server: Server) -> None:
    with _baseline_db(server) as url:
        migrate.apply_migrations(url, upto=BASELINE)
        with connect(url) as conn:
            for slug in ("Foo", "foo"):
                conn.execute("select engine.create_flow(%s)", (slug,))
            before = snapshot(conn)
        try:
            migrate.apply_migrations(url)
            message = "applied (not refused)"
        except migrate.MigrationError as exc:
            message = str(exc)
        with connect(url) as conn:
            changed = diff(before, snapshot(conn))
            columns = one(
                conn,
                "select count(*) from information_schema.columns where table_schema = 'engine' "
                "and column_name = 'queue_name'",
            )
        result.gate(
            "new_constraint_violation_rolls_the_migration_back",
            SqlState.QUEUE_COLLISION in message and "foo (flows Foo, foo)" in message and not changed and columns == 0,
            message.splitlines()[0],
        )


def _checked(fn: Callable[[ScenarioResult, str], None]) -> Callable[[ScenarioResult, str], None]:
    """`fn`, then the engine <-> queue consistency check on its database."""

    def part(result: ScenarioResult, url: str) -> None:
        fn(result, url)
        with connect(url) as conn:
            consistency.check(result, conn, "", fn.__name__.strip("_"))

    return part


PARTS = [
    PartSpec(fn.__name__.strip("_"), modeless(_checked(fn)), per_mode=False)
    for fn in (_naming, _identity, _big_ids, _unknown_messages, _selectors, concurrent_definitions)
]
