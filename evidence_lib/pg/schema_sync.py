"""The sync check: `migrations/` and `sql/` must describe the same `engine` schema.

Both are applied to two empty databases on one server; each side's catalog is read into a
normalized, sorted list of lines (tables and columns in attnum order, constraints, indexes,
triggers, types, sequences, full function definitions, ACLs, comments) and the two lists are
compared. The result carries a unified diff when they differ.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

from evidence_lib import MIGRATIONS_DIR, SQL_DIR
from evidence_lib.pg.db import Conn, Server, connect, scratch_database
from evidence_lib.pg.migrate import apply_migrations, apply_schema_sources

CATALOG_QUERIES: dict[str, str] = {
    "relation": """
        select format('%s %s persistence=%s options=%s acl=%s', c.relname, c.relkind,
                      c.relpersistence, c.reloptions, c.relacl)
          from pg_class c where c.relnamespace = $1::regnamespace and c.relkind <> 'i'""",
    "column": """
        select format('%s.%s #%s %s notnull=%s default=%s identity=%s generated=%s acl=%s',
                      c.relname, a.attname,
                      row_number() over (partition by c.oid order by a.attnum),
                      format_type(a.atttypid, a.atttypmod), a.attnotnull,
                      pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, a.attacl)
          from pg_attribute a
          join pg_class c on c.oid = a.attrelid
          left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
         where c.relnamespace = $1::regnamespace and a.attnum > 0 and not a.attisdropped
           and c.relkind in ('r', 'v', 'm', 'c', 'p', 'f')""",
    "constraint": """
        select format('%s %s %s', coalesce(c.relname, t.typname), k.conname,
                      pg_get_constraintdef(k.oid))
          from pg_constraint k
          left join pg_class c on c.oid = k.conrelid
          left join pg_type t on t.oid = k.contypid
         where k.connamespace = $1::regnamespace""",
    "index": """
        select pg_get_indexdef(i.indexrelid)
          from pg_index i join pg_class c on c.oid = i.indexrelid
         where c.relnamespace = $1::regnamespace""",
    "trigger": """
        select pg_get_triggerdef(t.oid)
          from pg_trigger t join pg_class c on c.oid = t.tgrelid
         where c.relnamespace = $1::regnamespace and not t.tgisinternal""",
    "type": """
        select format('%s %s acl=%s', t.typname, t.typtype, t.typacl)
          from pg_type t
         where t.typnamespace = $1::regnamespace and t.typtype in ('c', 'e', 'd')
           and (t.typtype <> 'c' or (select relkind from pg_class where oid = t.typrelid) = 'c')""",
    "enum": """
        select format('%s %s %s', t.typname, e.enumsortorder, e.enumlabel)
          from pg_enum e join pg_type t on t.oid = e.enumtypid
         where t.typnamespace = $1::regnamespace""",
    "sequence": """
        select format('%s %s start=%s inc=%s min=%s max=%s cycle=%s', c.relname,
                      format_type(s.seqtypid, null), s.seqstart, s.seqincrement, s.seqmin,
                      s.seqmax, s.seqcycle)
          from pg_sequence s join pg_class c on c.oid = s.seqrelid
         where c.relnamespace = $1::regnamespace""",
    "function": """
        select format('%s(%s) acl=%s', p.proname, pg_get_function_identity_arguments(p.oid),
                      p.proacl) || E'\n' || pg_get_functiondef(p.oid)
          from pg_proc p where p.pronamespace = $1::regnamespace""",
    "comment": """
        select format('%s %s', d.classoid::regclass, d.description) || ' on ' ||
               coalesce((select relname from pg_class where oid = d.objoid and
                         d.classoid = 'pg_class'::regclass),
                        (select proname from pg_proc where oid = d.objoid and
                         d.classoid = 'pg_proc'::regclass),
                        (select nspname from pg_namespace where oid = d.objoid and
                         d.classoid = 'pg_namespace'::regclass),
                        d.objoid::text) || '.' || d.objsubid
          from pg_description d
         where (d.classoid = 'pg_class'::regclass
                and d.objoid in (select oid from pg_class where relnamespace = $1::regnamespace))
            or (d.classoid = 'pg_proc'::regclass
                and d.objoid in (select oid from pg_proc where pronamespace = $1::regnamespace))
            or (d.classoid = 'pg_namespace'::regclass and d.objoid = $1::regnamespace)""",
    "schema": """
        select format('%s owner=%s acl=%s', n.nspname, pg_get_userbyid(n.nspowner), n.nspacl)
          from pg_namespace n where n.oid = $1::regnamespace""",
    "default_acl": """
        select format('%s %s %s', pg_get_userbyid(d.defaclrole), d.defaclobjtype, d.defaclacl)
          from pg_default_acl d where d.defaclnamespace in (0, $1::regnamespace)""",
}


def catalog_lines(conn: Conn, schema: str = "engine") -> list[str]:
    """The normalized catalog of `schema`: one sorted block of lines per object kind."""
    lines: list[str] = []
    for kind, query in CATALOG_QUERIES.items():
        if not schema.isidentifier():
            raise ValueError(f"not a schema name: {schema!r}")
        rows = conn.execute(query.replace("$1", f"'{schema}'").encode()).fetchall()
        for (text,) in sorted(rows, key=lambda r: str(r[0])):
            lines.extend(f"{kind}: {part}" for part in str(text).splitlines())
    return lines


@dataclass(frozen=True)
class SyncResult:
    in_sync: bool
    diff: str
    objects: int

    def summary(self) -> str:
        if self.in_sync:
            return f"schema in sync: migrations/ and sql/ give the same engine catalog ({self.objects} lines)"
        return "schema OUT OF SYNC: migrations/ and sql/ differ\n" + self.diff


def check_schema_sync(server: Server, *, migrations_dir: Path = MIGRATIONS_DIR, sql_dir: Path = SQL_DIR) -> SyncResult:
    """Apply migrations/ and sql/ to two empty databases and compare their `engine` catalogs."""
    with (
        scratch_database(server, prefix="sync_migrations") as by_migrations,
        scratch_database(server, prefix="sync_sources") as by_sources,
    ):
        apply_migrations(by_migrations, migrations_dir)
        apply_schema_sources(by_sources, sql_dir)
        with connect(by_migrations) as a, connect(by_sources) as b:
            left, right = catalog_lines(a), catalog_lines(b)
    diff = "\n".join(difflib.unified_diff(left, right, "migrations/", "sql/", lineterm="", n=2))
    return SyncResult(in_sync=left == right, diff=diff, objects=len(left))
