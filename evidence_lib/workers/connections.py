"""Connections for workers and the reconciler: bounded waits and bounded reconnects.

`ConnectionSource` keeps at most `size` connections, each autocommit and READ COMMITTED by
construction (the client rules the engine's promises depend on: a worker reads its message in
its own transaction before the claim, and a losing claim gets an empty set, not 40001). It
opens them on demand and reuses idle ones. When a connection breaks it drops every idle one too
(a server restart kills them all). When opening fails, the next attempt waits a capped
exponential backoff with jitter (`ReconnectPolicy`: connect timeout, first delay, cap), and
every wait for a connection is bounded by the caller's `timeout` (a settlement passes the time
left before its claim's horizon). It logs one line when the server goes away and one when it is
back, with how long it was gone, never one per retry.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg

from evidence_lib.pg.db import Conn

SESSION_SETTINGS = "set default_transaction_isolation = 'read committed'"


class ConnectionUnavailable(psycopg.OperationalError):
    """No connection could be had within the caller's bound; nothing was sent to the server."""


@dataclass(frozen=True)
class ReconnectPolicy:
    """How a lost server is waited for. Defaults: a connect gives up after 2 s (libpq's
    minimum), the first retry waits about 50 ms, the waits double up to a cap of 1 s (so a
    worker is back within about a second of the server), each with jitter."""

    connect_timeout: int = 2
    initial: float = 0.05
    cap: float = 1.0

    def __post_init__(self) -> None:
        if self.connect_timeout < 2 or self.initial <= 0 or self.cap < self.initial:
            raise ValueError(f"reconnect policy out of range: {self}")

    def delay(self, failures: int) -> float:
        """The wait before the next connect after `failures` failed ones (half fixed, half jitter)."""
        ceiling = min(self.cap, self.initial * 2 ** max(failures - 1, 0))
        return float(ceiling / 2 + random.uniform(0, ceiling / 2))


@dataclass
class Outages:
    """What a source saw of the server: every outage (start, end, seconds) and the retries."""

    events: list[tuple[float, str, str]] = field(default_factory=list)  # (wall time, away|back, detail)
    away_since: float | None = None
    failed_connects: int = 0
    connects: list[float] = field(default_factory=list)  # wall time of every connect attempt


def _default_log(level: int, event: str, message: str) -> None:
    logging.getLogger("evidence_lib.connections").log(level, message)


class ConnectionSource:
    """At most `size` connections to `url`; see the module docstring."""

    def __init__(
        self,
        url: str,
        *,
        size: int,
        policy: ReconnectPolicy | None = None,
        application_name: str = "evidence",
        log: Callable[[int, str, str], None] | None = None,
    ) -> None:
        self.url = url
        self.size = size
        self.policy = policy or ReconnectPolicy()
        self.application_name = application_name
        self.log = log or _default_log
        self.outages = Outages()
        self._idle: list[Conn] = []
        self._open = 0
        self._failures = 0
        self._next_connect = 0.0
        self._closed = False
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def connection(self, timeout: float = 30.0) -> Iterator[Conn]:
        """A connection within `timeout` seconds (ConnectionUnavailable otherwise); given back
        afterwards, or dropped with every idle one when it broke."""
        conn = self._take(time.monotonic() + max(timeout, 0.0))
        try:
            yield conn
        except BaseException as exc:
            broken = conn.closed or conn.broken
            if broken and isinstance(exc, psycopg.OperationalError):
                self.lost(exc)
            self._give_back(conn, broken=broken)
            raise
        self._give_back(conn, broken=conn.closed or conn.broken)

    def _take(self, deadline: float) -> Conn:
        with self._cond:
            while True:
                if self._closed:
                    raise ConnectionUnavailable(f"{self.application_name}: the connection source is closed")
                if self._idle:
                    return self._idle.pop()
                if self._open < self.size:
                    self._open += 1
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConnectionUnavailable(f"{self.application_name}: no free connection in time")
                self._cond.wait(left)
        try:
            return self._connect(deadline)
        except BaseException:
            with self._cond:
                self._open -= 1
                self._cond.notify()
            raise

    def _connect(self, deadline: float) -> Conn:
        with self._cond:
            wait = self._next_connect - time.monotonic()
        if wait > 0:
            if time.monotonic() + wait > deadline:
                raise ConnectionUnavailable(
                    f"{self.application_name}: the server is away; the next connect is due after the caller's bound"
                )
            time.sleep(wait)  # the reconnect backoff: bounded by the policy's cap and the caller's bound
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConnectionUnavailable(f"{self.application_name}: no time left to connect")
        with self._cond:
            self.outages.connects.append(time.time())
        try:
            conn = psycopg.connect(
                self.url,
                autocommit=True,
                application_name=self.application_name,
                connect_timeout=max(self.policy.connect_timeout, 2),
            )
            conn.execute(SESSION_SETTINGS)
        except psycopg.OperationalError as exc:
            self._failed(exc)
            raise ConnectionUnavailable(f"{self.application_name}: cannot connect: {str(exc).strip()}") from exc
        self._connected()
        return conn

    def _failed(self, exc: Exception) -> None:
        with self._cond:
            self._failures += 1
            self.outages.failed_connects += 1
            self._next_connect = time.monotonic() + self.policy.delay(self._failures)
            first = self.outages.away_since is None
            if first:
                self.outages.away_since = time.time()
                self.outages.events.append((time.time(), "away", str(exc).strip()[:200]))
        if first:
            self.log(
                logging.WARNING,
                "server_away",
                f"{self.application_name}: the server went away ({str(exc).strip()[:120]})",
            )

    def _connected(self) -> None:
        with self._cond:
            self._failures = 0
            self._next_connect = 0.0
            since, self.outages.away_since = self.outages.away_since, None
            if since is not None:
                gone = time.time() - since
                self.outages.events.append((time.time(), "back", f"{gone:.2f}"))
        if since is not None:
            self.log(logging.WARNING, "server_back", f"{self.application_name}: the server is back after {gone:.1f} s")

    def lost(self, exc: Exception) -> None:
        """A connection broke in use: the server is away until a connect succeeds again."""
        with self._cond:
            if self.outages.away_since is None:
                self.outages.away_since = time.time()
                self.outages.events.append((time.time(), "away", str(exc).strip()[:200]))
                first = True
            else:
                first = False
        if first:
            self.log(
                logging.WARNING, "server_away", f"{self.application_name}: lost the server ({str(exc).strip()[:120]})"
            )

    def _give_back(self, conn: Conn, *, broken: bool) -> None:
        with self._cond:
            if broken or self._closed:
                stale, self._idle = self._idle, []
                self._open -= 1 + len(stale)
                for c in [conn, *stale]:
                    with contextlib.suppress(Exception):
                        c.close()
            else:
                self._idle.append(conn)
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._open -= len(idle)
            self._cond.notify_all()
        for c in idle:
            with contextlib.suppress(Exception):
                c.close()

    def stats(self) -> dict[str, Any]:
        return {"open": self._open, "idle": len(self._idle), "failed_connects": self.outages.failed_connects}
