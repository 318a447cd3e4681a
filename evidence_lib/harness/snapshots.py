"""Whole-database snapshots of the engine and PGMQ tables, for zero-row-diff checks.

A `Snapshot` holds every row of every table in schema `engine` and every PGMQ queue, archive
and metadata table, as JSON text. `diff` says which rows appeared or disappeared. A refusal is
only accepted when the diff across it is empty.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from evidence_lib.pg.db import Conn

TABLES_QUERY = """
select n.nspname, c.relname
  from pg_class c join pg_namespace n on n.oid = c.relnamespace
 where c.relkind in ('r', 'p')
   and (n.nspname = 'engine' or (n.nspname = 'pgmq' and (c.relname like 'q\\_%' or
        c.relname like 'a\\_%' or c.relname = 'meta')))
 order by 1, 2
"""


@dataclass(frozen=True)
class Snapshot:
    tables: Mapping[str, frozenset[str]]

    def count(self, table: str) -> int:
        return len(self.tables.get(table, frozenset()))


@dataclass(frozen=True)
class TableDiff:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def snapshot(conn: Conn) -> Snapshot:
    """Every row of every engine and PGMQ table, read in one repeatable-read transaction."""
    if not conn.autocommit:
        raise psycopg.ProgrammingError("snapshot() needs an autocommit connection")
    tables: dict[str, frozenset[str]] = {}
    with conn.transaction():
        conn.execute("set transaction isolation level repeatable read")
        for schema, table in conn.execute(TABLES_QUERY).fetchall():
            rows = conn.execute(
                sql.SQL("select to_jsonb(t)::text from {}.{} t").format(sql.Identifier(schema), sql.Identifier(table))
            ).fetchall()
            tables[f"{schema}.{table}"] = frozenset(str(r[0]) for r in rows)
    return Snapshot(tables)


def diff(before: Snapshot, after: Snapshot) -> dict[str, TableDiff]:
    """The tables whose rows differ, with the rows added and removed (empty: nothing changed)."""
    out: dict[str, TableDiff] = {}
    for name in sorted(set(before.tables) | set(after.tables)):
        b = before.tables.get(name, frozenset())
        a = after.tables.get(name, frozenset())
        if a != b:
            out[name] = TableDiff(added=sorted(a - b), removed=sorted(b - a))
    return out


@dataclass(frozen=True)
class Refusal:
    """What a call that must be refused did: its SQLSTATE, message, and the rows it changed."""

    sqlstate: str | None
    message: str
    changed: dict[str, TableDiff]

    @property
    def changed_rows(self) -> int:
        return sum(len(d.added) + len(d.removed) for d in self.changed.values())


def attempt(conn: Conn, query: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> Refusal:
    """Run `query` in its own transaction; record its error and the zero-row diff across it."""
    before = snapshot(conn)
    sqlstate: str | None = None
    message = ""
    try:
        with conn.transaction():
            conn.execute(query, params)
    except psycopg.Error as exc:
        sqlstate = exc.sqlstate
        message = str(exc.diag.message_primary or exc)
    return Refusal(sqlstate, message, diff(before, snapshot(conn)))
