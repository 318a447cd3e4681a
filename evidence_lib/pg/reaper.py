"""A watchdog that stops a throwaway PostgreSQL when the process that started it dies.

`db` starts it with a pipe on stdin. A clean exit stops the server first and closes the pipe;
a killed parent (SIGKILL included) also closes the pipe, and then this process stops the
server and removes its folder, so no cluster outlives its owner.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    pg_ctl, pgdata, base, user = argv[0], Path(argv[1]), Path(argv[2]), argv[3]
    sys.stdin.read()  # returns at EOF: the parent closed the pipe or died
    if (pgdata / "postmaster.pid").exists():
        subprocess.run(
            [pg_ctl, "-D", str(pgdata), "-m", "immediate", "-w", "stop"],
            user=user or None,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            timeout=60,
        )
    shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
