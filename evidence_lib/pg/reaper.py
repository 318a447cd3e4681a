"""A watchdog that stops a throwaway PostgreSQL when the process that started it dies.

`db` starts it with a pipe on stdin. A clean exit stops the server first and closes the pipe;
a killed parent (SIGKILL included) also closes the pipe, and then this process stops the
server and removes its folder, so no cluster outlives its owner.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def watched(pg_ctl: str, pgdata: Path, base: Path, user: str) -> Iterator[None]:
    """Run the body with a watchdog that stops the cluster in `pgdata` and removes `base` if this
    process dies; SIGTERM becomes KeyboardInterrupt meanwhile, so cleanup code runs."""
    reaper = subprocess.Popen(
        [sys.executable, "-m", "evidence_lib.pg.reaper", pg_ctl, str(pgdata), str(base), user],
        stdin=subprocess.PIPE,
        start_new_session=True,  # Ctrl-C on the terminal must not kill the watchdog first
    )
    previous_term = signal.getsignal(signal.SIGTERM)
    if previous_term in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        yield
    finally:
        if reaper.stdin is not None:
            reaper.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            reaper.wait(timeout=60)
        if previous_term in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


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
