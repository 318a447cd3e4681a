"""PGMQ installation and the migration runner.

`prepare_database` installs the PGMQ SQL shipped in the `pgmq` PyPI package when schema
`pgmq` is absent, then applies `migrations/*.sql` in file-name order. Each file runs in one
transaction with a bounded `lock_timeout` and is recorded (file name, sha256) in
`engine.schema_migrations`. A database whose applied files differ from the files on disk is
refused before anything runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psycopg

from evidence_lib import MIGRATIONS_DIR, SQL_DIR
from evidence_lib.errors import EvidenceError
from evidence_lib.pg.db import Conn, connect

DEFAULT_LOCK_TIMEOUT = "5s"
PGMQ_COMMENT_PREFIX = "PGMQ SQL "


class MigrationError(EvidenceError):
    """A migration could not be applied; nothing of the failing file was committed."""


class MigrationChanged(MigrationError):
    """A file that is already applied has different contents on disk now."""


class MigrationMissing(MigrationError):
    """A file recorded as applied is no longer on disk."""


class MigrationOutOfOrder(MigrationError):
    """A new file sorts before a file that is already applied."""


@dataclass(frozen=True)
class SqlFile:
    name: str
    path: Path
    sha256: str
    text: str

    @classmethod
    def read(cls, path: Path) -> SqlFile:
        data = path.read_bytes()
        return cls(path.name, path, hashlib.sha256(data).hexdigest(), data.decode("utf-8"))


def sql_files(directory: Path) -> list[SqlFile]:
    """The `*.sql` files of a folder in name order."""
    return [SqlFile.read(p) for p in sorted(directory.glob("*.sql"))]


def candidate_artifact(directory: Path = MIGRATIONS_DIR) -> SqlFile:
    """The newest migration file: the artifact that evidence is about."""
    files = sql_files(directory)
    if not files:
        raise MigrationError(f"no migrations in {directory}")
    return files[-1]


def ensure_pgmq(conn: Conn) -> str:
    """Install PGMQ from the `pgmq` package unless schema `pgmq` exists; return its version.

    The version is recorded as the comment on schema `pgmq`.
    """
    import pgmq

    row = conn.execute(
        "select obj_description(oid, 'pg_namespace') from pg_namespace where nspname = 'pgmq'"
    ).fetchone()
    if row is not None:
        comment = row[0] or ""
        return comment.removeprefix(PGMQ_COMMENT_PREFIX).split(" ")[0] or "unknown"
    version = str(pgmq.get_embedded_sql_version())
    with conn.transaction():
        conn.execute(pgmq.get_embedded_install_sql())
        conn.execute(
            f"comment on schema pgmq is '{PGMQ_COMMENT_PREFIX}{version} "
            f"(installed from the pgmq PyPI package by evidence_lib)'"
        )
    return version


def applied(conn: Conn) -> dict[str, str]:
    """Applied migration file names and their sha256, empty before the first migration."""
    if conn.execute("select to_regclass('engine.schema_migrations')").fetchone() == (None,):
        return {}
    rows = conn.execute("select file_name, sha256 from engine.schema_migrations").fetchall()
    return {str(name): str(sha) for name, sha in rows}


def pending(conn: Conn, files: Sequence[SqlFile]) -> list[SqlFile]:
    """The files still to apply; refuses a history that differs from the files on disk."""
    done = applied(conn)
    on_disk = {f.name: f for f in files}
    for name, sha in sorted(done.items()):
        if name not in on_disk:
            raise MigrationMissing(f"migration {name} is applied but missing from disk")
        if on_disk[name].sha256 != sha:
            raise MigrationChanged(
                f"migration {name} changed after it was applied "
                f"(applied sha256 {sha}, file sha256 {on_disk[name].sha256}); "
                "never edit an applied migration, add a new one"
            )
    last_applied = max(done) if done else ""
    todo = [f for f in files if f.name not in done]
    early = [f.name for f in todo if f.name < last_applied]
    if early:
        raise MigrationOutOfOrder(f"new migrations {early} sort before the applied {last_applied}; rename them")
    return todo


def _run_file(conn: Conn, file: SqlFile, lock_timeout: str, record: bool) -> None:
    try:
        with conn.transaction():
            conn.execute(f"set local lock_timeout = '{lock_timeout}'")
            conn.execute(file.text.encode())
            if record:
                conn.execute(
                    "insert into engine.schema_migrations (file_name, sha256) values (%s, %s)",
                    (file.name, file.sha256),
                )
    except psycopg.Error as exc:
        diag = exc.diag
        where = f" ({diag.context.strip().splitlines()[-1]})" if diag.context else ""
        raise MigrationError(
            f"{file.name} failed and was rolled back: [{diag.sqlstate}] "
            f"{diag.message_primary}{where}"
            + (f"\nDETAIL: {diag.message_detail}" if diag.message_detail else "")
            + (f"\nHINT: {diag.message_hint}" if diag.message_hint else "")
        ) from exc


def apply_migrations(
    url: str,
    directory: Path = MIGRATIONS_DIR,
    *,
    upto: str | None = None,
    lock_timeout: str = DEFAULT_LOCK_TIMEOUT,
    progress: Callable[[str], None] | None = None,
) -> list[str]:
    """Install PGMQ if needed and apply pending migrations up to file name `upto` (inclusive).

    Returns the names applied now.
    """
    files = [f for f in sql_files(directory) if upto is None or f.name <= upto]
    done: list[str] = []
    with connect(url, application_name="evidence_migrate") as conn:
        ensure_pgmq(conn)
        for file in pending(conn, files):
            if progress:
                progress(f"applying {file.name}")
            _run_file(conn, file, lock_timeout, record=True)
            done.append(file.name)
    return done


def apply_schema_sources(url: str, directory: Path = SQL_DIR) -> None:
    """Apply the schema-first sources (`sql/*.sql`) to an empty database, for the sync check."""
    with connect(url, application_name="evidence_schema_sources") as conn:
        ensure_pgmq(conn)
        for file in sql_files(directory):
            _run_file(conn, file, DEFAULT_LOCK_TIMEOUT, record=False)
