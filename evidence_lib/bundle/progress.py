"""The runner's side of progress: print what the running scenario reports, and never stay silent.

Every line starts with the time since `make evidence` started (`evidence [02:15] ...`), so the
longest silence of a run can be read off its log. The watcher tails the file the scenario writes
through `evidence_lib.progress.report`, prints a phase change at once and counts at most every
`COUNT_EVERY` seconds, and prints a heartbeat naming the last phase when nothing was printed for
`HEARTBEAT` seconds (a scenario stuck in one statement still shows it is alive, and where).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HEARTBEAT = 10.0
COUNT_EVERY = 5.0


class Clock:
    """Elapsed time since the run started, as `[mm:ss]`."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def stamp(self) -> str:
        seconds = int(time.monotonic() - self.started)
        return f"[{seconds // 60:02d}:{seconds % 60:02d}]"


class Say:
    """One printer for the runner, thread-safe, every line stamped."""

    def __init__(self, clock: Clock, out: Callable[[str], None] | None = None) -> None:
        self.clock, self._out = clock, out or (lambda line: print(line, flush=True))
        self._lock = threading.Lock()
        self.last = time.monotonic()

    def __call__(self, text: str) -> None:
        with self._lock:
            self._out(f"evidence {self.clock.stamp()} {text}")
            self.last = time.monotonic()


def describe(event: dict[str, Any]) -> str:
    text = str(event.get("phase") or "")
    done, total = event.get("done"), event.get("total")
    if done is not None:
        text += f": {done}" + (f"/{total}" if total is not None else "") + f" {event.get('unit') or ''}".rstrip()
    return text


class Watcher:
    """Tails `path` while scenario `label` runs (use as a context manager)."""

    def __init__(self, path: Path, label: str, say: Say) -> None:
        self.path, self.label, self.say = path, label, say
        self.started = time.monotonic()
        self.last_event: dict[str, Any] = {"phase": "no progress reported yet"}
        self._offset = 0
        self._last_count = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"progress-{label}", daemon=True)

    def __enter__(self) -> Watcher:
        self.path.write_text("")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._drain()

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self._drain()
            if time.monotonic() - self.say.last >= HEARTBEAT:
                elapsed = time.monotonic() - self.started
                self.say(f"{self.label}: still running, {elapsed:.0f} s in; last: {describe(self.last_event)}")

    def _drain(self) -> None:
        try:
            with self.path.open("rb") as source:
                source.seek(self._offset)
                chunk = source.read()
        except OSError:
            return
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next read
        self._offset += len(complete)
        for line in complete.decode("utf-8", errors="replace").splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            changed = event.get("phase") != self.last_event.get("phase")
            self.last_event = event
            now = time.monotonic()
            if changed or event.get("done") is None or now - self._last_count >= COUNT_EVERY:
                self._last_count = now
                self.say(f"{self.label}: {describe(event)}")
