"""Server lifecycle: a throwaway cluster is removed on exit and when its owner is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from evidence_lib.pg import db, servers
from evidence_lib.pg.db import Server, connect
from tests.helpers import scalar


def test_embedded_server_is_removed_on_exit() -> None:
    with servers.open_server() as s:
        assert s.kind == "throwaway" and s.data_dir is not None and s.data_dir.exists()
        data_dir = s.data_dir
        with s.admin() as c:
            assert scalar(c, "show listen_addresses") == ""  # Unix socket only
    assert not data_dir.exists() and not data_dir.parent.exists()


def test_embedded_server_is_removed_on_error() -> None:
    data_dir: Path | None = None
    try:
        with servers.open_server() as s:
            data_dir = s.data_dir
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert data_dir is not None and not data_dir.parent.exists()


def test_a_killed_owner_does_not_leave_a_server_behind() -> None:
    code = (
        "import sys, time\nfrom evidence_lib.pg import servers\n"
        "with servers.open_server() as s:\n"
        "    print(s.data_dir, flush=True)\n"
        "    sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    data_dir = Path(child.stdout.readline().strip())
    assert (data_dir / "postmaster.pid").exists()
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 30  # liveness bound for the reaper
    while data_dir.parent.exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # liveness bound while the reaper removes the cluster
    assert not data_dir.parent.exists()


def test_an_external_server_gets_scratch_databases_only(server: Server) -> None:
    with servers.open_server(server.maintenance_url) as external:
        assert external.kind == "external"
        with db.scratch_database(external) as url, connect(url) as c:
            name = scalar(c, "select current_database()")
        with external.admin() as a:
            assert scalar(a, "select count(*) from pg_database where datname = %s", (name,)) == 0


def test_the_server_is_the_postgresql_version_asked_for(server: Server) -> None:
    """`make test PG=15` must really run on PostgreSQL 15 (and the default on the embedded 18)."""
    with server.admin() as conn:
        major = str(db.one(conn, "select current_setting('server_version_num')::int / 10000"))
    if not os.environ.get("DATABASE_URL"):
        assert major == (os.environ.get(servers.PG_ENV) or servers.EMBEDDED_MAJOR)
