"""Waiting for the engine's wake-up instead of polling (docs/contract.md, "Wake-ups"): a waiter
LISTENs on its session's own channel (`engine_wake_<pid>`), registers once per idle period
(`engine.v2_listen`) and peeks once in the same round trip (work may have come between the empty
read and the registration), then waits for a notification at most `seconds` (the fallback for one
lost to a reconnect). The engine wakes one waiter per event and consumes its registration, so a
woken waiter registers again when it is idle again; one that became busy without being woken
deregisters (`engine.v2_unlisten`), so a busy pool costs the engine no notification at all."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

import psycopg

from evidence_lib.engine import v2
from evidence_lib.pg.db import Conn, ServerUnavailable, connect

Peek = Callable[[Conn], bool]  # is there work already? (on the waiter's own connection)
Timed = Callable[[str], AbstractContextManager[None]]  # measures one round trip (the owner's timings)
CHUNK = 0.5  # seconds of one wait on the socket: a stop request is seen this fast
LINGER_POLLS, LINGER_INTERVAL = 5, 0.003  # look again this often before registering (a busy pool never does)


class Waiter:
    def __init__(self, url: str, channel: str, name: str, peek: Peek, *, pipelined: bool = False,
                 timed: Timed | None = None) -> None:  # fmt: skip
        """`pipelined`: the peek is a plain read that may travel with the registration in one
        round trip (each its own transaction); a peek that does work goes alone after it."""
        self.url, self.channel, self.name, self.peek = url, channel, name, peek
        self.pipelined = pipelined
        self.timed: Timed = timed or (lambda _name: contextlib.nullcontext())
        self.conn: Conn | None = None
        self.waiting = False  # registered with engine.v2_listen, not yet woken
        self.pid: int | None = None  # the backend of its last connection (its wake-up channel)
        self.wakeups = 0  # notifications received
        self.fallbacks = 0  # waits that ended by the fallback, not a notification
        self.lingered = 0  # short pauses since the owner last found work (it registers after LINGER_POLLS)
        self.registrations = 0  # v2_listen calls

    def wait(self, seconds: float, stopping: Callable[[], bool], pause: Callable[[float], object]) -> bool:
        """Wait for work; True when woken (or work was already there, or after a short pause in
        which the owner should look again), False after the fallback or when the server went away
        (the caller then polls, or sleeps its poll interval). The first LINGER_POLLS waits after the
        owner last found work are pauses of LINGER_INTERVAL (`pause`, which a stop request ends):
        under load work comes back within them and the owner never registers, so a busy pool
        writes no registration and the engine sends it no notification."""
        if self.lingered < LINGER_POLLS and not self.waiting:
            self.lingered += 1
            pause(LINGER_INTERVAL)
            return True
        try:
            conn = self._connection()
            if not self.waiting:
                if self.pipelined:
                    with self.timed("wakeups.v2_listen+peek"), conn.pipeline() as pipeline:  # one round trip
                        v2.listen(conn, self.channel)
                        pipeline.sync()
                        found = self.peek(conn)
                else:
                    with self.timed("wakeups.v2_listen"):
                        v2.listen(conn, self.channel)
                    found = self.peek(conn)
                self.waiting = True
                self.registrations += 1
                if found:
                    return True
            deadline = time.monotonic() + seconds
            while not stopping() and (left := deadline - time.monotonic()) > 0:
                if any(n.payload == self.channel for n in conn.notifies(timeout=min(left, CHUNK), stop_after=1)):
                    self.wakeups += 1
                    self.waiting = False  # the engine consumed the registration
                    return True
            if not stopping():
                self.fallbacks += 1
            return False
        except (psycopg.Error, ServerUnavailable):  # the server went away: the caller polls
            self.close()
            return False

    def busy(self) -> None:
        """The owner found work: it lingers again before its next registration."""
        self.lingered = 0
        if self.waiting and self.conn is not None:
            try:
                with self.timed("wakeups.v2_unlisten"):
                    v2.unlisten(self.conn, self.channel)
            except psycopg.Error:
                self.close()
        self.waiting = False

    def _connection(self) -> Conn:
        if self.conn is None or self.conn.closed:
            self.conn = connect(self.url, application_name=f"{self.name}_wakeups")
            with self.timed("wakeups.listen"):
                v2.wake_channel(self.conn)
            self.pid = self.conn.info.backend_pid
            self.waiting = False
        return self.conn

    def close(self) -> None:
        """Its session's waiter row goes with the session (swept by the next v2_listen)."""
        if self.conn is not None:
            with contextlib.suppress(psycopg.Error):
                self.conn.close()
        self.conn, self.waiting = None, False
