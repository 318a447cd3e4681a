"""Crashing and restarting a throwaway server the suite owns: the server-restart fault.

Only a server this suite started (the embedded one) has a `ServerControl`; a `DATABASE_URL`
server has none, and the fault is skipped there with the reason said. `make evidence` starts the
server in the runner and hands its control to the notebooks through `EVIDENCE_SERVER_CONTROL`
(the notebooks' kernels inherit it), so a scenario can crash the server it runs on.

Crashes are real: `pg_ctl stop -m immediate` (every backend quits at once, no checkpoint) or
SIGKILL to the postmaster (its backends notice its death and exit). `start` brings the same data
directory back with crash recovery and waits until it accepts connections.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

import psycopg
from psycopg import conninfo

from evidence_lib.errors import EvidenceError

ENV = "EVIDENCE_SERVER_CONTROL"
Crash = Literal["immediate", "kill9"]


class ServerControlError(EvidenceError):
    """The server could not be crashed or did not come back in time."""


@dataclass(frozen=True)
class ServerControl:
    """What it takes to crash and restart one embedded server."""

    bin_dir: str
    data_dir: str
    socket_dir: str
    log: str
    user: str | None  # the system user the server runs as (embedded_postgres when run as root)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls, url: str) -> ServerControl | None:
        """The control handed down by the runner, if it is for the server at `url`."""
        raw = os.environ.get(ENV)
        if not raw:
            return None
        control = cls(**json.loads(raw))
        host = str(conninfo.conninfo_to_dict(url).get("host") or "")
        return control if host == control.socket_dir else None

    def _pg_ctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(Path(self.bin_dir) / "pg_ctl"), "-D", self.data_dir, *args],
            user=self.user if os.geteuid() == 0 else None,
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def postmaster_pid(self) -> int | None:
        pid_file = Path(self.data_dir) / "postmaster.pid"
        try:
            return int(pid_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def crash(self, how: Crash) -> float:
        """Crash the server now; returns the wall-clock time of the crash."""
        pid = self.postmaster_pid()
        if pid is None:
            raise ServerControlError(f"no postmaster.pid in {self.data_dir}: the server is not running")
        at = time.time()
        if how == "immediate":
            self._pg_ctl("-m", "immediate", "-w", "stop")
        else:
            os.kill(pid, signal.SIGKILL)
        return at

    def start(self, url: str, timeout: float = 30.0) -> float:
        """Start the server again (crash recovery runs) and wait until `url` accepts a
        connection; returns the wall-clock time it did."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            done = self._pg_ctl(
                "-w", "-t", "20", "-o", '-h ""', "-o", f"-k {self.socket_dir}", "-l", self.log, "start", check=False
            )
            if done.returncode == 0:
                break
            last = (done.stderr or done.stdout).strip()[-300:]
            time.sleep(0.2)  # the killed postmaster's backends are still exiting: try again
        else:
            raise ServerControlError(f"the server did not restart within {timeout:.0f} s: {last}")
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(url, connect_timeout=2):
                    return time.time()
            except psycopg.OperationalError:
                time.sleep(0.05)  # recovery is finishing: poll until it accepts connections
        raise ServerControlError(f"the server did not accept connections within {timeout:.0f} s")
