"""The released anchor: pgflow's SQL from its npm package, installed beside this engine.

`npm pack @pgflow/core@<version>` fetches the package (the version the registry serves is a
parameter); its `dist/supabase/migrations/*.sql` are applied in order to a scratch database on
the same server, with documented stand-ins for the platform's objects:
- the roles `anon`, `authenticated` and `service_role` (created without login when missing);
- `realtime.send(payload, event, topic, private)`: a no-op (the platform broadcasts; nothing
  here listens);
- `CREATE EXTENSION ... pgmq` lines are skipped: PGMQ comes from the `pgmq` wheel's SQL, as
  for this engine (the anchor's migration checks the `headers` column of PGMQ 1.5+; 1.13 has it).
Without npm the anchor is "not measured: npm missing"; nothing fails.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evidence_lib.errors import EvidenceError
from evidence_lib.pg.db import connect
from evidence_lib.pg.migrate import ensure_pgmq

DEFAULT_VERSION = "0.8.1"
PACKAGE = "@pgflow/core"
STAND_INS = """
do $$
declare
  v_role text;
begin
  foreach v_role in array array['anon', 'authenticated', 'service_role'] loop
    if not exists (select from pg_catalog.pg_roles where rolname = v_role) then
      execute pg_catalog.format('create role %I nologin', v_role);
    end if;
  end loop;
end $$;
create schema if not exists realtime;
create or replace function realtime.send(payload jsonb, event text, topic text, private boolean default true)
returns void language sql as $$ select null::void $$;
"""
EXTENSION = re.compile(r"^\s*create\s+extension\b[^;]*;", re.IGNORECASE | re.MULTILINE)


class AnchorUnavailable(EvidenceError):
    """The released anchor could not be fetched (no npm, no registry) or installed."""


@dataclass(frozen=True)
class Anchor:
    version: str
    migrations: list[Path]


def fetch(version: str = DEFAULT_VERSION, cache: Path | None = None) -> Anchor:
    """`npm pack` the package into a cache folder (reused) and list its migrations."""
    npm = shutil.which("npm")
    if npm is None:
        raise AnchorUnavailable("not measured: npm missing")
    folder = (cache or Path(tempfile.gettempdir()) / "evidence-anchor") / version
    migrations_dir = folder / "package" / "dist" / "supabase" / "migrations"
    if not migrations_dir.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            [npm, "pack", f"{PACKAGE}@{version}", "--pack-destination", str(folder)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        tarballs = sorted(folder.glob("*.tgz"))
        if done.returncode != 0 or not tarballs:
            raise AnchorUnavailable(f"not measured: npm pack {PACKAGE}@{version} failed: {done.stderr.strip()[-300:]}")
        with tarfile.open(tarballs[-1]) as archive:
            archive.extractall(folder, filter="data")
    migrations = sorted(migrations_dir.glob("*.sql"))
    if not migrations:
        raise AnchorUnavailable(f"not measured: {PACKAGE}@{version} ships no migrations")
    return Anchor(version, migrations)


def install(url: str, anchor: Anchor) -> None:
    """PGMQ from the wheel, the stand-ins, then every migration of the anchor, in order."""
    with connect(url, application_name="anchor_install") as conn:
        ensure_pgmq(conn)
        conn.execute(STAND_INS.encode())
        for path in anchor.migrations:
            sql = EXTENSION.sub("-- (pgmq comes from the pgmq wheel)", path.read_text())
            try:
                with conn.transaction():
                    conn.execute(sql.encode())
            except Exception as exc:
                raise AnchorUnavailable(f"not measured: {path.name} failed: {exc}") from exc
