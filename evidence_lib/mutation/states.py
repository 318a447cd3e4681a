"""What the reach oracle compares after a trial: the state of the engine's and PGMQ's tables.

`digests` reads each table's rows with timestamps and uuids masked; `touches` reads which tables
the current transaction wrote, so two states are compared only where either run wrote.
"""

from __future__ import annotations

import psycopg

from evidence_lib.pg.db import Conn

TABLES = """
select c.oid::regclass::text,
       coalesce(array_agg(a.attname::text order by a.attnum)
                  filter (where t.typname in ('timestamptz', 'timestamp', 'date')), '{}')
  from pg_catalog.pg_class as c
  join pg_catalog.pg_namespace as n on n.oid = c.relnamespace
  join pg_catalog.pg_attribute as a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
  join pg_catalog.pg_type as t on t.oid = a.atttypid
 where n.nspname in ('engine', 'pgmq') and c.relkind in ('r', 'p')
 group by c.oid
 order by 1
"""
TOUCHES = """
select c.oid::regclass::text,
       pg_catalog.pg_stat_get_xact_tuples_inserted(c.oid) + pg_catalog.pg_stat_get_xact_tuples_updated(c.oid)
         + pg_catalog.pg_stat_get_xact_tuples_deleted(c.oid),
       pg_catalog.pg_relation_filenode(c.oid)
  from pg_catalog.pg_class as c join pg_catalog.pg_namespace as n on n.oid = c.relnamespace
 where n.nspname in ('engine', 'pgmq') and c.relkind in ('r', 'p')
"""
UUID_PATTERN = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
Touches = dict[str, tuple[int, int]]  # table -> (rows written in this transaction, its file)


def touches(conn: Conn) -> Touches:
    """For every engine and PGMQ table, the rows inserted, updated and deleted so far in this
    transaction (PostgreSQL counts them in rolled-back subtransactions too, so the count only
    grows) and its file (a TRUNCATE gives a new one). A table whose pair is the same before and
    after an operation was not written by it."""
    return {str(t): (int(n), int(f)) for t, n, f in conn.execute(TOUCHES).fetchall()}


def written(before: Touches, after: Touches) -> set[str]:
    return {t for t, v in after.items() if before.get(t) != v}


def digests(conn: Conn, only: set[str] | None = None) -> dict[str, str]:
    """Per table (all, or `only` those), its rows with their timestamps left out (the model
    judges them, in windows) and their uuids masked (the model judges which row points at
    which): equal for two states that differ only by when they were made and by the random ids
    they drew. Computed by the server in one round trip."""
    tables = [(name, masked) for name, masked in conn.execute(TABLES).fetchall() if only is None or name in only]
    if not tables:
        return {}
    parts = [
        psycopg.sql.SQL(
            "select {name}::text, count(*), md5(coalesce(string_agg(r.masked, '|' order by r.masked), ''))"
            " from (select regexp_replace((to_jsonb(t) - {masked}::text[])::text, {uuid}, '-', 'g') as masked"
            " from {table} as t) as r"
        ).format(name=psycopg.sql.Literal(name), masked=psycopg.sql.Literal(list(masked)),
                 uuid=psycopg.sql.Literal(UUID_PATTERN), table=psycopg.sql.SQL(name))
        for name, masked in tables
    ]
    rows = conn.execute(psycopg.sql.SQL(" union all ").join(parts)).fetchall()
    return {str(t): f"{n} {h}" for t, n, h in rows}
