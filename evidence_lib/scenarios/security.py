"""Scenario 9, security: who may call and write what, and the temporary-schema shadowing attack.

Three parts, every gate read back from the catalog or from what a real login could do:
- the search path: every engine function declares `search_path = pg_catalog, pg_temp`;
- privilege probes per role (PUBLIC, `engine_worker`, `engine_operator`): the catalog's grants
  against the contract's matrix, and real attempts by a login of each role that must be refused
  with 42501 and a zero-row diff;
- the shadowing attack (`shadowing`) through every security definer function, as a login of the
  role that may call it, in each queue mode.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, get_args

import psycopg

from evidence_lib.engine.flows import QueueMode
from evidence_lib.engine.roles import Role, may_execute
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.pg.db import Conn, connect, one, rows
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios import shadowing
from evidence_lib.scenarios.support import consistency
from evidence_lib.scenarios.support.parts import PartSpec, candidate_databases, modeless, run_parts, single_database
from evidence_lib.scenarios.support.setup import modes, scenario_server

SCENARIO = "09_security"
SAFE_PATH = "search_path=pg_catalog, pg_temp"
ROLES = ("public", "engine_worker", "engine_operator")
TABLE_PRIVILEGES = ("select", "insert", "update", "delete", "truncate")


def run(queue_modes: str = "flow,step", database_url: str = "", hooks: str = "") -> ScenarioResult:
    result = ScenarioResult(SCENARIO, "Security", {"queue_modes": queue_modes, "hooks": hooks})
    with (
        result.capture_logs(),
        scenario_server(database_url) as server,
        candidate_databases(server, hooks=hooks) as databases,
    ):
        run_parts(result, PARTS, databases, modes(queue_modes))
    consistency.gates(result)
    return result


def _connected(fn: Callable[[ScenarioResult, Conn], None]) -> Callable[[ScenarioResult, str], None]:
    def part(result: ScenarioResult, url: str) -> None:
        with connect(url) as conn:
            fn(result, conn)

    return part


def check_search_path(result: ScenarioResult, conn: Conn) -> None:
    """Gate: no engine function lacks `search_path = pg_catalog, pg_temp`."""
    found = rows(
        conn,
        "select p.oid::regprocedure::text as function, p.prosecdef as security_definer, "
        "coalesce(array_to_string(p.proconfig, '; '), '(none)') as settings "
        "from pg_proc p where p.pronamespace = 'engine'::regnamespace order by 1",
    )
    for row in found:
        row["safe"] = SAFE_PATH in str(row["settings"])
    result.table("function_settings", found)
    unsafe = [r["function"] for r in found if not r["safe"]]
    result.gate(
        "every_engine_function_searches_pg_catalog_first_and_pg_temp_last",
        bool(found) and not unsafe,
        f"{len(found)} functions; without the safe path: {', '.join(unsafe) or 'none'}",
    )


def check_grants(result: ScenarioResult, conn: Conn) -> None:
    """Gates per role: function EXECUTE, schema USAGE and engine table privileges as the
    contract says; PGMQ archives and foreign queues closed to everyone but the owner."""
    table: list[dict[str, Any]] = []
    functions = rows(conn, "select p.oid, p.proname from pg_proc p where p.pronamespace = 'engine'::regnamespace")
    tables = rows(conn, "select c.oid, c.relname from pg_class c where c.relnamespace = 'engine'::regnamespace "
                  "and c.relkind in ('r', 'p', 'v')")  # fmt: skip
    for role in ROLES:
        for f in functions:
            actual = bool(one(conn, "select has_function_privilege(%s, %s, 'execute')", (role, f["oid"])))
            table.append(_probe(role, f"execute engine.{f['proname']}", may_execute(role, f["proname"]), actual))
        usage = bool(one(conn, "select has_schema_privilege(%s, 'engine', 'usage')", (role,)))
        table.append(_probe(role, "usage on schema engine", role != "public", usage))
        for t in tables:
            for privilege in TABLE_PRIVILEGES:
                actual = bool(one(conn, "select has_table_privilege(%s, %s, %s)", (role, t["oid"], privilege)))
                table.append(_probe(role, f"{privilege} on engine.{t['relname']}", False, actual))
        pgmq_usage = bool(one(conn, "select has_schema_privilege(%s, 'pgmq', 'usage')", (role,)))
        table.append(_probe(role, "usage on schema pgmq", role == "engine_worker", pgmq_usage))
    result.table("privilege_matrix", table)
    for role in ROLES:
        mine = [r for r in table if r["role"] == role]
        wrong = [f"{r['probe']} (expected {r['expected']}, is {r['actual']})" for r in mine if not r["ok"]]
        result.gate(
            f"{role}_holds_exactly_the_contract_privileges",
            bool(mine) and not wrong,
            f"{len(mine)} probes; wrong: {'; '.join(wrong[:8]) or 'none'}",
        )


def _probe(role: str, probe: str, expected: bool, actual: bool) -> dict[str, Any]:
    return {"role": role, "probe": probe, "expected": expected, "actual": actual, "ok": expected == actual}


def check_refusals(result: ScenarioResult, conn: Conn, url: str) -> None:
    """Gates per role: a real login of the role is refused (42501) every call and write it must
    not make, and each refusal changed no row."""
    conn.execute("select engine.create_flow('sec_probe')")
    conn.execute("select engine.add_step('sec_probe', 'a')")
    conn.execute("select pgmq.create('foreign_app')")
    calls = rows(conn, "select p.proname, p.oid::regprocedure::text as signature, "
                 "pg_get_function_identity_arguments(p.oid) as args "
                 "from pg_proc p where p.pronamespace = 'engine'::regnamespace order by 1")  # fmt: skip
    table: list[dict[str, Any]] = []
    for role in get_args(Role):
        forbidden = [_null_call(c["signature"]) for c in calls if not may_execute(role, c["proname"])]
        forbidden += [
            "update engine.runs set status = 'failed'",
            "insert into engine.flows (flow_slug) values ('x')",
            "delete from engine.task_claims",
            "select * from engine.runs",
            "select * from pgmq.a_sec_probe",
            "select * from pgmq.read('foreign_app', 30, 1)",
            "delete from pgmq.q_sec_probe",
        ]
        with shadowing.attacker_login(conn, url, role) as (_login, login_url), connect(login_url) as probe:
            for statement in forbidden:
                table.append({"role": role, "statement": statement} | _refused(probe, conn, statement))
    with shadowing.attacker_login(conn, url, "engine_operator") as (_login, login_url), connect(login_url) as probe:
        probe.execute("set engine.clock_offset = '1000 seconds'")  # a session setting anyone may set...
        clock = _refused(probe, conn, "select engine.v2_reconcile('00000000-0000-4000-8000-0000000000cc')")
    table.append({"role": "engine_operator", "statement": "v2_reconcile with engine.clock_offset set"} | clock)
    result.gate(
        "the_test_clock_is_refused_to_a_login_that_is_not_superuser",  # ...but only a superuser's is obeyed
        clock["ok"],
        f"v2_reconcile with engine.clock_offset set -> {clock['sqlstate']}, {clock['rows_changed']} rows changed",
    )
    result.table("login_refusals", table)
    for role in get_args(Role):
        mine = [r for r in table if r["role"] == role]
        wrong = [f"{r['statement']} -> {r['sqlstate']}, {r['rows_changed']} rows" for r in mine if not r["ok"]]
        result.gate(
            f"a_{role}_login_is_refused_everything_else_and_changes_nothing",
            bool(mine) and not wrong,
            f"{len(mine)} statements refused with 42501; wrong: {'; '.join(wrong[:5]) or 'none'}",
        )


def _null_call(signature: str) -> str:
    """`engine.f(uuid,text)` -> `select engine.f(null::uuid, null::text)` (privilege is checked first)."""
    name, _, args = signature.partition("(")
    types = [a.strip() for a in args.rstrip(")").split(",") if a.strip()]
    return f"select {name}({', '.join(f'null::{t}' for t in types)})"


def _refused(probe: Conn, owner: Conn, statement: str) -> dict[str, Any]:
    """Run `statement` as the probe login; the diff is read by the owner (who can see every table)."""
    before = snapshot(owner)
    try:
        probe.execute(statement.encode())
        sqlstate = None
    except psycopg.Error as exc:
        sqlstate = exc.sqlstate
    changed = diff(before, snapshot(owner))
    rows_changed = sum(len(d.added) + len(d.removed) for d in changed.values())
    return {"sqlstate": sqlstate, "rows_changed": rows_changed, "ok": sqlstate == "42501" and rows_changed == 0}


def check_shadowing(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    """Gates per security definer function: the attack through it escalates nothing; and every
    security definer function of the catalog has an attack."""
    with connect(url) as conn:
        _shadowing(result, conn, url, mode)


def _shadowing(result: ScenarioResult, conn: Conn, url: str, mode: QueueMode) -> None:
    functions = shadowing.security_definer_functions(conn)
    missing = sorted(set(functions) - set(shadowing.RECIPES))
    result.gate(
        "every_security_definer_function_is_attacked",
        bool(functions) and not missing,
        f"{len(functions)} security definer functions; without an attack: {', '.join(missing) or 'none'}",
        mode,
    )
    attacks = [shadowing.attack(conn, url, f, mode) for f in sorted(set(functions) & set(shadowing.RECIPES))]
    result.append_rows("shadowing_attacks", [a.row() for a in attacks])
    consistency.check(result, conn, mode, "every shadowing attack")
    for a in attacks:
        result.gate(
            f"shadowing_through_{a.function}_as_{a.role}_escalates_nothing",
            a.held,
            f"call: {a.call_result}; traps fired with the owner's rights: {', '.join(a.fired_inside) or 'none'}; "
            f"login superuser afterwards: {a.escalated}; queue columns changed: "
            f"{', '.join(a.queue_columns_changed) or 'none'}",
            mode,
        )


def _refusals(result: ScenarioResult, url: str) -> None:
    with connect(url) as conn:
        check_refusals(result, conn, url)


PARTS = [
    PartSpec("search_path", modeless(_connected(check_search_path)), per_mode=False),
    PartSpec("privileges", modeless(_connected(check_grants)), per_mode=False),
    PartSpec("refusals", modeless(_refusals), per_mode=False),
    PartSpec("shadowing", single_database(check_shadowing)),
]
