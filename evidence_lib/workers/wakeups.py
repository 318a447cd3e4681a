"""Waiting for the engine's wake-up instead of polling (docs/contract.md, "Wake-ups"): a waiter
registers once per idle period (LISTEN + `engine.v2_listen`), peeks once (work may have come
between the empty read and the registration), then waits for a notification at most `seconds`
(the fallback for one lost to a reconnect); when work comes it stops being a waiter
(`engine.v2_unlisten`), so a busy pool costs the engine no notification at all."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import psycopg

from evidence_lib.engine import v2
from evidence_lib.pg.db import Conn, connect

Peek = Callable[[Conn], bool]  # is there work already? (on the waiter's own connection)
CHUNK = 0.5  # seconds of one wait on the socket: a stop request is seen this fast


class Waiter:
    def __init__(self, url: str, channel: str, name: str, peek: Peek) -> None:
        self.url, self.channel, self.name, self.peek = url, channel, name, peek
        self.conn: Conn | None = None
        self.waiting = False  # registered with engine.v2_listen
        self.wakeups = 0  # notifications received
        self.fallbacks = 0  # waits that ended by the fallback, not a notification

    def wait(self, seconds: float, stopping: Callable[[], bool]) -> bool:
        """Wait for work; True when woken (or work was already there), False after the fallback
        or when the server went away (the caller then polls, or sleeps its poll interval)."""
        try:
            conn = self._connection()
            if not self.waiting:
                v2.listen(conn, self.channel)
                self.waiting = True
                if self.peek(conn):
                    return True
            deadline = time.monotonic() + seconds
            while not stopping() and (left := deadline - time.monotonic()) > 0:
                if any(True for _ in conn.notifies(timeout=min(left, CHUNK), stop_after=1)):
                    self.wakeups += 1
                    return True
            self.fallbacks += 1
            return False
        except psycopg.Error:
            self.close()
            return False

    def busy(self) -> None:
        if self.waiting and self.conn is not None:
            try:
                v2.unlisten(self.conn, self.channel)
            except psycopg.Error:
                self.close()
        self.waiting = False

    def _connection(self) -> Conn:
        if self.conn is None or self.conn.closed:
            self.conn = connect(self.url, application_name=f"{self.name}_wakeups")
            self.waiting = False
        return self.conn

    def close(self) -> None:
        """Its session's waiter row goes with the session (swept by the next v2_listen)."""
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
        self.conn, self.waiting = None, False
