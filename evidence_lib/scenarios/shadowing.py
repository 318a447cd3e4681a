"""The temporary-schema shadowing attack, run for real against every security definer function.

A plain login granted only `engine_worker` or `engine_operator` plants, in its own session:
temporary domains named like the built-in types engine code and PGMQ use (`jsonb`, `text`,
`uuid`, ...), whose CHECK calls a trap; temporary views named like the engine's and PGMQ's
relations and composite types, whose rows call the trap; and look-alike functions and operators
(`lower`, `clock_timestamp`, `=`, `->>`, ...) in a schema of its own placed first on its
`search_path`. The trap records where it ran and, when it runs with another role's rights than
the login's, makes the login superuser. Then the login calls one engine function the way a
real caller would. The attack fails (as it must) when afterwards: the login is not superuser,
no trap fired inside the function, the call did its normal work, and every PGMQ queue column
still has the type `pg_catalog.jsonb` after the login's session ended.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from psycopg import conninfo
from psycopg import sql as pgsql
from psycopg.types.json import Jsonb

from evidence_lib.engine import v1, v2
from evidence_lib.engine.flows import Flow, QueueMode, compile_flow, route
from evidence_lib.engine.roles import Role
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.waits import wait_for_lease_expiry
from evidence_lib.pg.db import Conn, connect, one
from evidence_lib.plain import plain

# Built-in type names a function body or PGMQ may spell without a schema.
SHADOWED_TYPES = (
    "jsonb", "json", "text", "uuid", "timestamptz", "timestamp", "interval", "int2", "int4", "int8",
    "bool", "numeric", "float8", "name", "regclass", "bpchar", "varchar",
)  # fmt: skip
# Relation and composite-type names of the engine and of PGMQ, plus catalogs engine code reads.
SHADOWED_RELATIONS = (
    "flows", "steps", "deps", "runs", "step_states", "step_tasks", "run_work", "task_claims",
    "task_settlements", "engine_errors", "schema_migrations", "task_grant", "v2_grant",
    "v2_receipt", "v2_report", "meta", "message_record", "queue_record", "pg_class", "pg_roles",
    "pg_locks", "pg_namespace",
)  # fmt: skip
# (name, argument types, return type, body using the arguments as $1, $2 ...)
LOOKALIKE_FUNCTIONS = (
    ("lower", "text", "text", "pg_catalog.lower($1)"),
    ("upper", "text", "text", "pg_catalog.upper($1)"),
    ("length", "text", "int4", "pg_catalog.length($1)"),
    ("clock_timestamp", "", "timestamptz", "pg_catalog.clock_timestamp()"),
    ("now", "", "timestamptz", "pg_catalog.now()"),
    ("gen_random_uuid", "", "uuid", "pg_catalog.gen_random_uuid()"),
    ("jsonb_build_object", "text, jsonb", "jsonb", "pg_catalog.jsonb_build_object($1, $2)"),
    ("to_jsonb", "text", "jsonb", "pg_catalog.to_jsonb($1)"),
    ("octet_length", "text", "int4", "pg_catalog.octet_length($1)"),
    ("cardinality", "anyarray", "int4", "pg_catalog.cardinality($1)"),
    ("format", "text, text", "text", "pg_catalog.format($1, $2)"),
)
# (operator, left type, right type, implementing built-in)
LOOKALIKE_OPERATORS = (
    ("=", "text", "text", "pg_catalog.texteq"),
    ("=", "uuid", "uuid", "pg_catalog.uuid_eq"),
    ("=", "int8", "int8", "pg_catalog.int8eq"),
    ("<>", "text", "text", "pg_catalog.textne"),
    ("->>", "jsonb", "text", "pg_catalog.jsonb_object_field_text"),
    ("||", "text", "text", "pg_catalog.textcat"),
)

TRAP = """
create function pg_temp.trap(what pg_catalog.text) returns pg_catalog.bool
language plpgsql as $trap$
begin
  perform pg_catalog.set_config('attack.fired', pg_catalog.concat_ws(',',
    pg_catalog.current_setting('attack.fired', true),
    pg_catalog.format('%s@%s', what, current_user)), false);
  if current_user operator(pg_catalog.<>) session_user then
    execute pg_catalog.format('alter role %I superuser', session_user);
  end if;
  return true;
end
$trap$"""


@dataclass(frozen=True)
class Attack:
    """One engine function attacked by one role, and what the database says afterwards."""

    function: str
    role: Role
    mode: QueueMode
    call: str
    call_ok: bool
    call_result: str
    fired_inside: list[str]
    escalated: bool
    queue_columns_changed: list[str]

    @property
    def held(self) -> bool:
        """The engine held: the call worked, nothing of the attacker ran, nothing changed type."""
        return self.call_ok and not self.fired_inside and not self.escalated and not self.queue_columns_changed

    def row(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "function": self.function,
            "role": self.role,
            "call_result": self.call_result,
            "traps_fired_with_owner_rights": ", ".join(self.fired_inside) or "none",
            "login_became_superuser": self.escalated,
            "queue_columns_changed": ", ".join(self.queue_columns_changed) or "none",
            "held": self.held,
        }


@dataclass(frozen=True)
class Recipe:
    """How a real caller reaches `function`: owner-side setup, the caller's call, its success."""

    role: Role
    setup: Callable[[Conn, QueueMode, str], dict[str, Any]]
    call: str
    ok: Callable[[list[tuple[Any, ...]]], bool]


def _v2_read(conn: Conn, mode: QueueMode, slug: str, timeout: int = 30) -> dict[str, Any]:
    flow = define_ab(conn, slug, mode, timeout=timeout)
    run_id = v2.start_run(conn, slug, {"n": 1})
    return {"flow": flow, "run": run_id, "queue": route(flow, "A"), "msg": read_step_message(conn, flow, "A", run_id)}


def _v2_claimed(conn: Conn, mode: QueueMode, slug: str, timeout: int = 30) -> dict[str, Any]:
    p = _v2_read(conn, mode, slug, timeout)
    grant = v2.claim(conn, p["run"], "A", p["queue"], p["msg"])
    assert grant is not None
    return p | {"claim": grant.claim_id}


def _v2_expired(conn: Conn, mode: QueueMode, slug: str) -> dict[str, Any]:
    p = _v2_claimed(conn, mode, slug, timeout=1)  # lease horizon = claim + 3 s
    wait_for_lease_expiry(conn, p["claim"])
    return p


def _v2_settled(conn: Conn, mode: QueueMode, slug: str) -> dict[str, Any]:
    p = _v2_claimed(conn, mode, slug)
    v2.settle(conn, p["claim"], "completed", {"a": 1})
    return p


def _v1_flow(conn: Conn, mode: QueueMode, slug: str, timeout: int = 60) -> Flow[Any]:
    flow: Flow[Any] = Flow(slug, timeout=timeout)
    flow.add("a", lambda x: x)
    if mode == "step":
        from evidence_lib.engine.flows import with_step_queues

        compile_flow(conn, with_step_queues(flow))
    else:
        compile_flow(conn, flow)
    return flow


def _v1_queue(conn: Conn, slug: str) -> str:
    return str(one(conn, "select queue_name from engine.steps where flow_slug = %s and step_slug = 'a'", (slug,)))


def _v1_read(conn: Conn, mode: QueueMode, slug: str, timeout: int = 60) -> dict[str, Any]:
    _v1_flow(conn, mode, slug, timeout)
    run_id = v1.start_flow(conn, slug, {"n": 1})
    queue = _v1_queue(conn, slug)
    [message] = v1.read_messages(conn, queue, 30, 1)
    return {"run": run_id, "queue": queue, "msg": message.msg_id}


def _v1_started(conn: Conn, mode: QueueMode, slug: str, timeout: int = 60) -> dict[str, Any]:
    p = _v1_read(conn, mode, slug, timeout)
    assert len(v1.start_tasks(conn, p["queue"], [p["msg"]])) == 1
    return p


def _v1_stalled(conn: Conn, mode: QueueMode, slug: str) -> dict[str, Any]:
    p = _v1_started(conn, mode, slug, timeout=1)
    # setup only: age the start so the task counts as stalled without waiting its timeout
    conn.execute(
        "update engine.step_tasks set started_at = started_at - interval '1 minute' where run_id = %s", (p["run"],)
    )
    return p


def _v1_completed(conn: Conn, mode: QueueMode, slug: str) -> dict[str, Any]:
    p = _v1_started(conn, mode, slug)
    v1.complete_task(conn, p["run"], "a", 0, {"done": True})
    return p


def _defined(conn: Conn, mode: QueueMode, slug: str) -> dict[str, Any]:
    conn.execute("select engine.create_flow(%s, queue_mode => %s)", (slug, mode))
    return {}


def _v1_defined(conn: Conn, mode: QueueMode, slug: str) -> dict[str, Any]:
    _v1_flow(conn, mode, slug)
    return {}


def _v2_defined(conn: Conn, mode: QueueMode, slug: str) -> dict[str, Any]:
    define_ab(conn, slug, mode)
    return {}


def _nothing(conn: Conn, mode: QueueMode, slug: str) -> dict[str, Any]:
    return {}


def _rows(n: int) -> Callable[[list[tuple[Any, ...]]], bool]:
    return lambda rows: len(rows) == n


def _first(*values: Any) -> Callable[[list[tuple[Any, ...]]], bool]:
    return lambda rows: len(rows) == 1 and rows[0][0] in values


def _at_least_one(rows: list[tuple[Any, ...]]) -> bool:
    return len(rows) == 1 and int(rows[0][0]) >= 1


INT8S = "array[%(msg)s]::pg_catalog.int8[]"
# Every security definer function of schema engine, called the way its role calls it. A test
# proves this covers every security definer function in the catalog.
RECIPES: dict[str, Recipe] = {
    "v2_claim": Recipe(
        "engine_worker", _v2_read, f"select * from engine.v2_claim(%(run)s, 'A', %(queue)s, {INT8S})", _rows(1)
    ),
    "v2_settle": Recipe(
        "engine_worker",
        _v2_claimed,
        "select verdict from engine.v2_settle(%(claim)s, 'completed', %(result)s)",
        _first("accepted"),
    ),
    "start_tasks": Recipe("engine_worker", _v1_read, f"select * from engine.start_tasks(%(queue)s, {INT8S})", _rows(1)),
    "complete_task": Recipe(
        "engine_worker",
        _v1_started,
        "select (engine.complete_task(%(run)s, 'a', 0, %(result)s)).status",
        _first("completed"),
    ),
    "fail_task": Recipe(
        "engine_worker",
        _v1_started,
        "select (engine.fail_task(%(run)s, 'a', 0, 'boom')).status",
        _first("queued", "failed"),
    ),
    "create_flow": Recipe(
        "engine_operator", _nothing, "select (engine.create_flow(%(slug)s, queue_mode => %(mode)s)).flow_slug", _rows(1)
    ),
    "add_step": Recipe("engine_operator", _defined, "select (engine.add_step(%(slug)s, 'a')).step_slug", _first("a")),
    "delete_flow": Recipe("engine_operator", _v1_defined, "select engine.delete_flow(%(slug)s)", _rows(1)),
    "start_flow": Recipe("engine_operator", _v1_defined, "select engine.start_flow(%(slug)s, %(result)s)", _rows(1)),
    "requeue_stalled_tasks": Recipe("engine_operator", _v1_stalled, "select engine.requeue_stalled_tasks()", _first(1)),
    "prune_data_older_than": Recipe(
        "engine_operator",
        _v1_completed,
        "select engine.prune_data_older_than('0 seconds'::pg_catalog.interval)",
        _at_least_one,
    ),
    "v2_start_run": Recipe(
        "engine_operator", _v2_defined, "select engine.v2_start_run(%(slug)s, %(result)s)", _rows(1)
    ),
    "v2_take_over": Recipe(
        "engine_operator",
        _v2_expired,
        f"select * from engine.v2_take_over(%(run)s, 'A', %(claim)s, %(queue)s, {INT8S})",
        _rows(1),
    ),
    "v2_reconcile": Recipe(
        "engine_operator",
        _v2_settled,
        "select actions from engine.v2_reconcile(%(run)s, 8)",
        _at_least_one,
    ),
    "v2_reconcile_next": Recipe(
        "engine_operator", _v2_settled, "select actions from engine.v2_reconcile_next(8)", _at_least_one
    ),
    "v2_claim_all": Recipe(
        "engine_worker",
        _v2_read,
        "select claim_id is not null from engine.v2_claim_all(array[%(run)s]::pg_catalog.uuid[], "
        "array['A']::pg_catalog.text[], array[%(queue)s]::pg_catalog.text[], " + INT8S + ")",
        _first(True),
    ),
    "v2_settle_all": Recipe(
        "engine_worker",
        _v2_claimed,
        "select verdict from engine.v2_settle_all(array[%(claim)s]::pg_catalog.uuid[], "
        "array['completed']::pg_catalog.text[], array[%(result)s]::pg_catalog.jsonb[])",
        _first("accepted"),
    ),
    "v2_reconcile_all": Recipe(
        "engine_operator",
        _v2_settled,
        "select actions from engine.v2_reconcile_all(array[%(run)s]::pg_catalog.uuid[], 8)",
        _at_least_one,
    ),
    "v2_listen": Recipe("engine_worker", _v2_defined, "select engine.v2_listen('engine_v2_dirty')", _rows(1)),
    "v2_unlisten": Recipe("engine_worker", _nothing, "select engine.v2_unlisten(null)", _rows(1)),
}


def security_definer_functions(conn: Conn) -> list[str]:
    """The names of the security definer functions in schema engine."""
    rows = conn.execute(
        "select p.proname from pg_proc p where p.pronamespace = 'engine'::regnamespace and p.prosecdef order by 1"
    ).fetchall()
    return [str(r[0]) for r in rows]


@contextmanager
def attacker_login(owner: Conn, url: str, role: Role) -> Iterator[tuple[str, str]]:
    """A fresh login granted only `role` (and TEMP, which PUBLIC has by default) with a schema of
    its own for look-alikes; yields (login name, its connection string); dropped afterwards."""
    name = f"attacker_{secrets.token_hex(4)}"
    password = secrets.token_hex(12)
    owner.execute(pgsql.SQL("create role {} login password {}").format(pgsql.Identifier(name), pgsql.Literal(password)))
    try:
        owner.execute(pgsql.SQL("grant {} to {}").format(pgsql.Identifier(role), pgsql.Identifier(name)))
        ident = pgsql.Identifier(name)
        owner.execute(pgsql.SQL("create schema {} authorization {}").format(ident, ident))
        yield name, conninfo.make_conninfo(url, user=name, password=password)
    finally:
        owner.execute(pgsql.SQL("drop owned by {} cascade").format(pgsql.Identifier(name)))
        owner.execute(pgsql.SQL("drop role {}").format(pgsql.Identifier(name)))


def plant(conn: Conn, schema: str) -> None:
    """Plant every look-alike in the attacker's session and put its schema first on the path."""
    conn.execute(TRAP)
    for t in SHADOWED_TYPES:
        conn.execute(f"create domain pg_temp.{t} as pg_catalog.{t} check (pg_temp.trap('type {t}'))")
    for r in SHADOWED_RELATIONS:
        conn.execute(f"create view pg_temp.{r} as select 1 as x where pg_temp.trap('relation {r}')")
    for name, args, returns, body in LOOKALIKE_FUNCTIONS:
        params = ", ".join(f"pg_catalog.{a.strip()}" for a in args.split(",")) if args else ""
        conn.execute(
            f"create function {schema}.{name}({params}) returns pg_catalog.{returns} language sql as "
            f"$f$ select {body} where pg_temp.trap('function {name}') $f$"
        )
    for i, (op, left, right, impl) in enumerate(LOOKALIKE_OPERATORS):
        conn.execute(
            f"create function {schema}.op_{i}(pg_catalog.{left}, pg_catalog.{right}) returns pg_catalog.bool "
            f"language sql as $f$ select {impl}($1, $2) is not null and pg_temp.trap('operator {op}') $f$"
        )
        conn.execute(
            f"create operator {schema}.{op} (leftarg = pg_catalog.{left}, rightarg = pg_catalog.{right}, "
            f"function = {schema}.op_{i})"
        )
    conn.execute(f"set search_path = {schema}, pg_catalog, public")


def queue_column_types(conn: Conn) -> dict[str, str]:
    """Every PGMQ queue and archive table's `message` / `headers` column and its type."""
    rows = conn.execute(
        "select c.relname || '.' || x.col, coalesce(a.atttypid::regtype::text, 'missing') "
        "from pg_class c cross join (values ('message'), ('headers')) as x(col) "
        "left join pg_attribute a on a.attrelid = c.oid and a.attname = x.col and not a.attisdropped "
        "where c.relnamespace = 'pgmq'::regnamespace and c.relkind = 'r' "
        "and (c.relname like 'q\\_%' or c.relname like 'a\\_%')"
    ).fetchall()
    return {str(k): str(v) for k, v in rows}


def attack(owner: Conn, url: str, function: str, mode: QueueMode) -> Attack:
    """Run the attack through `function` as a login of the function's role (see module doc)."""
    recipe = RECIPES[function]
    slug = f"sec_{function}_{mode}"[:40]
    params = recipe.setup(owner, mode, slug) | {"slug": slug, "mode": mode, "result": Jsonb({"ok": 1})}
    params = {k: v for k, v in params.items() if k != "flow"}
    with attacker_login(owner, url, recipe.role) as (login, login_url):
        with connect(login_url, application_name="attacker") as conn:
            plant(conn, login)
            try:
                rows = conn.execute(recipe.call, params).fetchall()
                call_ok, call_result = recipe.ok(rows), f"{len(rows)} row(s): {plain(rows[:1])}"
            except Exception as exc:  # the call must work: an error here is a finding, not a crash
                call_ok, call_result = False, f"{type(exc).__name__}: {exc}"
            fired = str(one(conn, "select pg_catalog.current_setting('attack.fired', true)") or "")
        escalated = bool(one(owner, "select rolsuper from pg_roles where rolname = %s", (login,)))
        columns = queue_column_types(owner)  # after the login's session ended: temp types are gone
    inside = [f for f in fired.split(",") if f and not f.endswith(f"@{login}")]
    changed = [f"{col}: {typ}" for col, typ in sorted(columns.items()) if typ != "jsonb"]
    return Attack(function, recipe.role, mode, recipe.call, call_ok, call_result, inside, escalated, changed)
