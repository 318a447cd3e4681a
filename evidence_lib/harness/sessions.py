"""Named sessions (one connection each, own application_name, known backend pid) that run
steps asynchronously, and the autocommit controller that holds hook locks and watches them."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from evidence_lib.harness.locks import PROTOCOL_LOCKTYPES, LivenessTimeout, LockWait, dump, stuck_waits, waits
from evidence_lib.pg.db import Conn, connect

HOOK_KEY_SPACE = 7001  # advisory lock classid of engine._hook points


class Session:
    """One backend. Steps run one after another on a thread of their own, so the caller can
    send a step and go on while it waits on a lock."""

    def __init__(self, url: str, name: str, hooks: list[str] | None = None) -> None:
        self.name = name
        self.conn: Conn = connect(url, application_name=name)
        row = self.conn.execute("select pg_backend_pid()").fetchone()
        assert row is not None
        self.pid: int = row[0]
        if hooks:
            self.conn.execute("select set_config('engine.hooks', %s, false)", (",".join(hooks),))
        self._jobs: queue.Queue[tuple[Callable[[Conn], Any], Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=f"session-{name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, future = job
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(self.conn))
            except BaseException as exc:
                future.set_exception(exc)

    def send(self, fn: Callable[[Conn], Any]) -> Future[Any]:
        """Run `fn(conn)` on this session's thread; returns at once."""
        future: Future[Any] = Future()
        self._jobs.put((fn, future))
        return future

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=5)
        self.conn.close()


class Controller:
    """An autocommit session that never waits on a lock itself: it takes hook locks (which no
    one else holds exclusively), releases them, and reads pg_locks."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.conn = connect(url, application_name="controller")
        row = self.conn.execute("select pg_backend_pid()").fetchone()
        assert row is not None
        self.pid: int = row[0]
        self.timeout = timeout
        self.held: dict[str, int] = {}
        # the race's sessions (set by whoever runs one): a session counts as blocked only when it
        # waits on one of them that is itself stuck (see locks.stuck_waits); empty: on anyone
        self.members: set[int] = set()

    def hook_key(self, point: str) -> int:
        row = self.conn.execute("select engine._hook_key(%s)", (point,)).fetchone()
        assert row is not None
        return int(row[0])

    def hold(self, point: str) -> int:
        """Take the exclusive advisory lock of a hook point: armed sessions park there."""
        key = self.hook_key(point)
        row = self.conn.execute("select pg_try_advisory_lock(%s, %s)", (HOOK_KEY_SPACE, key)).fetchone()
        if row is None or not row[0]:
            raise LivenessTimeout(f"controller could not take hook lock {point}\n{dump(self.conn)}")
        self.held[point] = key
        return key

    def release(self, point: str | None = None) -> list[str]:
        """Release one held hook point (or all of them); returns the points released."""
        points = [point] if point else list(self.held)
        for p in points:
            key = self.held.pop(p)
            self.conn.execute("select pg_advisory_unlock(%s, %s)", (HOOK_KEY_SPACE, key))
        return points

    def waits(self, session: Session, busy: set[int] | None = None) -> list[LockWait]:
        """What `session` waits on. With `members` set: only waits that a controller step alone
        can end (`locks.stuck_waits`), where a member with no step in flight (not in `busy`)
        holds what it holds until its next step is sent."""
        if not self.members:
            return [w for w in waits(self.conn, session.pid) if w.locktype in PROTOCOL_LOCKTYPES]
        parked = {self.pid} | (self.members - (busy or set()) - {session.pid})
        return stuck_waits(self.conn, session.pid, self.members | {self.pid}, parked)

    def settle(self, session: Session, future: Future[Any], busy: set[int] | None = None) -> list[LockWait] | None:
        """Wait until the step on `session` completed (None) or is blocked on a lock that only a
        controller step can free (the proof rows; `members`, `busy`: the members with a step in
        flight, `locks.stuck_waits`). Raises LivenessTimeout with a lock dump when neither
        happens in time."""
        deadline = time.monotonic() + self.timeout
        while True:
            if future.done():
                return None
            found = self.waits(session, busy)
            if found:
                return found
            if time.monotonic() > deadline:
                raise LivenessTimeout(
                    f"session {session.name} neither completed nor blocked in {self.timeout}s\n" + dump(self.conn)
                )
            time.sleep(0.002)  # poll interval of an observation, never an ordering

    def terminate(self, session: Session) -> None:
        self.conn.execute("select pg_terminate_backend(%s, 5000)", (session.pid,))

    def close(self) -> None:
        self.release()
        self.conn.close()
