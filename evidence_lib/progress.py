"""Progress from inside a scenario to the terminal that runs `make evidence`.

A notebook runs in its own kernel process, so a scenario cannot print to the runner's terminal.
The runner names a file in `EVIDENCE_PROGRESS`; `report()` appends one JSON line per event
(phase, runs done, total) and the runner's watcher prints them, with a heartbeat when a scenario
says nothing for a while (`bundle.progress`). With the variable unset (a notebook opened by
hand, a test) `report()` only logs at DEBUG level: nothing is printed into notebooks. With it set
to `-` (a command run in a terminal, such as `make mutation`) the lines go to standard error.

Any layer may call it: it is a root module with no dependency inside evidence_lib.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time

ENV = "EVIDENCE_PROGRESS"
_log = logging.getLogger("evidence_lib.progress")
_lock = threading.Lock()
_last_written = 0.0
_last_phase = ""
MIN_INTERVAL = 1.0  # counts within one phase are written at most once a second


def report(phase: str, done: int | None = None, total: int | None = None, *, unit: str = "runs") -> None:
    """Say what the scenario is doing now: `phase` (e.g. "soak (step)"), and optionally how many
    of `total` `unit` are done. Cheap enough to call in a loop: repeated counts in one phase are
    thinned to one line a second."""
    global _last_written, _last_phase
    path = os.environ.get(ENV)
    _log.debug("progress: %s %s/%s %s", phase, done, total, unit)
    if not path:
        return
    now = time.monotonic()
    with _lock:
        counting = done is not None and (total is None or done < total)
        if counting and phase == _last_phase and now - _last_written < MIN_INTERVAL:
            return
        _last_written, _last_phase = now, phase
        if path == "-":
            count = f": {done}/{total} {unit}" if done is not None and total else f": {done} {unit}" if done else ""
            print(f"{time.strftime('%H:%M:%S')} {phase}{count}", file=sys.stderr, flush=True)
            return
        line = json.dumps({"at": time.time(), "phase": phase, "done": done, "total": total, "unit": unit})
        try:
            with open(path, "a", encoding="utf-8") as sink:
                sink.write(line + "\n")
        except OSError as exc:  # progress is a courtesy: never fail a scenario over it
            _log.debug("progress file %s not writable: %s", path, exc)


def phase(name: str) -> None:
    """A new phase with no count (a shorthand for `report(name)`)."""
    report(name)
