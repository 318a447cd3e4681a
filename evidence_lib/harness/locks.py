"""Observing waits: who is blocked, on what, by whom (`pg_locks`, `pg_blocking_pids`).

The controller that calls these must be in autocommit and must never wait on a lock itself.
The only pause here is the poll interval of `wait_until_blocked`, bounded by a liveness
timeout; it observes an order that locks already forced, it never decides one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from evidence_lib.errors import EvidenceError
from evidence_lib.pg.db import Conn

POLL_INTERVAL = 0.002  # seconds between two looks at pg_locks
# Lock types a protocol decision can make a session wait on. Not here: `extend` and `page`
# (relation extension and index page locks, held for microseconds by whichever backend extends a
# file first), `frozenid` and `spectoken` (a speculative insertion, resolved by its inserter at
# once): waits on those are decided by the scheduler, never by the engine, and last no longer
# than the holder's next instructions.
PROTOCOL_LOCKTYPES = frozenset({"relation", "tuple", "transactionid", "virtualxid", "object", "advisory", "userlock"})


class LivenessTimeout(EvidenceError):
    """A session did not reach the expected state in time; the message holds the lock dump."""


@dataclass(frozen=True)
class LockWait:
    """One lock a session is waiting for, and the sessions blocking it."""

    pid: int
    locktype: str
    mode: str
    relation: str | None
    classid: int | None
    objid: int | None
    objsubid: int | None
    transactionid: str | None
    blocked_by: tuple[int, ...]

    def describe(self, names: dict[int, str] | None = None) -> str:
        names = names or {}
        target = {
            "advisory": f"advisory {self.classid}/{self.objid}",
            "transactionid": f"transactionid {self.transactionid}",
            "relation": f"relation {self.relation}",
            "tuple": f"tuple {self.relation}",
        }.get(self.locktype, f"{self.locktype} {self.relation or ''}".strip())
        by = ", ".join(names.get(p, str(p)) for p in self.blocked_by)
        return f"{target} {self.mode} not granted, blocked by {by}"


WAITS_QUERY = """
select l.pid, l.locktype, l.mode, l.relation::regclass::text, l.classid::int, l.objid::bigint,
       l.objsubid::int, l.transactionid::text, pg_blocking_pids(l.pid)
  from pg_locks l
 where l.pid = any(%s) and not l.granted
"""


def _waits_of(controller: Conn, pids: list[int]) -> list[LockWait]:
    rows = controller.execute(WAITS_QUERY, (pids,)).fetchall()
    return [LockWait(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], tuple(r[8] or ())) for r in rows]


def waits(controller: Conn, pid: int) -> list[LockWait]:
    """The locks `pid` is waiting for right now (empty: it is not blocked)."""
    return _waits_of(controller, [pid])


def stuck_waits(controller: Conn, pid: int, members: set[int], parked: set[int]) -> list[LockWait]:
    """The waits of `pid` that only a controller step can end (empty: it is running or done).

    A wait counts when its lock type is one a protocol decision makes (`PROTOCOL_LOCKTYPES`) and
    one of the sessions blocking it is itself stuck: one of `parked` (the controller, idle while
    it holds hook points), or a member of the race that waits, in turn, on a stuck session
    (a cycle among members is a deadlock: stuck until the server ends it). A wait on a member that
    is running, or on a backend outside the race (autovacuum, another test), ends without any
    step of ours, in an order the scheduler picks: it is not shown, the caller looks again. This
    is PostgreSQL's isolation tester's rule (`pg_isolation_test_session_is_blocked` counts only
    the test's own sessions), made strict enough that a transcript depends on the engine's
    locks and the controller's steps alone."""
    everyone = sorted(members | {pid})
    by_pid: dict[int, list[LockWait]] = {}
    for w in _waits_of(controller, everyone):
        if w.locktype in PROTOCOL_LOCKTYPES:
            by_pid.setdefault(w.pid, []).append(w)

    def stuck(p: int, path: frozenset[int]) -> bool:
        if p in parked or p in path:
            return True
        return any(
            b in members and stuck(b, path | {p}) for w in by_pid.get(p, []) for b in w.blocked_by
        )

    return [w for w in by_pid.get(pid, []) if any(b in members and stuck(b, frozenset({pid})) for b in w.blocked_by)]


def wait_until_blocked(controller: Conn, pid: int, *, timeout: float = 10.0, by: int | None = None) -> list[LockWait]:
    """Return once `pid` waits on a lock (held by `by`, when given); else LivenessTimeout."""
    deadline = time.monotonic() + timeout
    while True:
        found = waits(controller, pid)
        if found and (by is None or any(by in w.blocked_by for w in found)):
            return found
        if time.monotonic() > deadline:
            raise LivenessTimeout(f"pid {pid} is not blocked after {timeout}s\n" + dump(controller))
        time.sleep(POLL_INTERVAL)


def dump(controller: Conn) -> str:
    """`pg_stat_activity` and `pg_locks` of this database, for a liveness failure report."""
    lines = ["pg_stat_activity:"]
    activity: list[tuple[Any, ...]] = controller.execute(
        "select pid, application_name, state, wait_event_type, wait_event, "
        "pg_blocking_pids(pid), left(query, 120) from pg_stat_activity "
        "where datname = current_database() order by pid"
    ).fetchall()
    lines += [f"  {r}" for r in activity]
    lines.append("pg_locks:")
    locks: list[tuple[Any, ...]] = controller.execute(
        "select pid, locktype, mode, granted, relation::regclass, classid, objid, objsubid, "
        "transactionid from pg_locks where database = (select oid from pg_database where "
        "datname = current_database()) or locktype = 'transactionid' order by pid"
    ).fetchall()
    lines += [f"  {r}" for r in locks]
    return "\n".join(lines)
