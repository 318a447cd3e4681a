"""Waits that let real time pass (a lease, a backoff): each has a deadline of seconds and orders
nothing between sessions (orderings are forced by locks, see `sessions`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar, cast
from uuid import UUID

from evidence_lib.errors import EvidenceError
from evidence_lib.pg.db import Conn, one

T = TypeVar("T")


class WaitTimeout(EvidenceError):
    """What a wait waited for did not happen before its deadline."""


def wait_for_lease_expiry(conn: Conn, claim_id: UUID, timeout: float = 30.0) -> None:
    """Return once the server clock is past the claim's lease horizon (a lease must really
    expire; this wait lets it, it orders nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        row = conn.execute(
            "select clock_timestamp() > lease_expires_at, "
            "extract(epoch from lease_expires_at - clock_timestamp()) "
            "from engine.task_claims where claim_id = %s",
            (claim_id,),
        ).fetchone()
        if row is None:
            raise EvidenceError(f"unknown claim {claim_id}")
        if row[0]:
            return
        if time.monotonic() > deadline:
            raise WaitTimeout(f"lease of claim {claim_id} did not expire within {timeout}s")
        time.sleep(min(max(float(row[1]), 0.0) + 0.01, 0.5))  # lets the lease expire


def wait_for_backoff(conn: Conn, run_id: UUID, timeout: float = 90.0) -> None:
    """Return once the server clock is past the run's next_attempt_at (a backoff must really
    pass before the next attempt counts; this wait lets it, it orders nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        left = one(
            conn,
            "select extract(epoch from next_attempt_at - clock_timestamp())::float8 "
            "from engine.run_work where run_id = %s",
            (run_id,),
        )
        if left is None or left < 0:
            return
        if time.monotonic() > deadline:
            raise WaitTimeout(f"backoff of run {run_id} did not pass within {timeout}s")
        time.sleep(min(float(left) + 0.01, 1.0))  # lets the backoff pass


def bounded(call: Callable[[], T], seconds: float, what: str) -> T:
    """`call()` in a thread of its own, given `seconds` to return (a liveness guard: a worker call
    that blocks for ever fails here in seconds, named, instead of at the part's deadline). Its
    exception is raised here; a call still running is left to its daemon thread."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"bounded: {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise WaitTimeout(f"{what}: did not return within {seconds:.0f} s")
    if "error" in box:
        raise box["error"]
    return cast(T, box["value"])


def joined(threads: list[threading.Thread], seconds: float) -> None:
    """Every thread stopped within `seconds` of the shutdown request, all together (a worker that
    idles on a long fallback instead of its stop signal fails here in seconds, named)."""
    deadline = time.monotonic() + seconds
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    running = [t.name for t in threads if t.is_alive()]
    if running:
        raise WaitTimeout(f"still running {seconds:.0f} s after the shutdown request: {running}")
