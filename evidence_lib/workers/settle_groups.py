"""Group commit of settlements: every settlement whose handler finished while the previous group
was committing goes in the next group, one transaction (`engine.v2_settle_all`: each settlement
its own call in a subtransaction), two round trips:

1. `begin`, the transaction id (so a commit whose reply is lost can be judged later with
   `pg_xact_status`) and `statement_timeout` = the time left before the group's earliest lease
   horizon (by the server's clock);
2. the settlements and `commit`, in one message.

A handler thread hands its settlement in and waits for its group's commit; the first thread to
find no group committing commits, for everyone waiting, until nobody is (a leader, as in a
database's group commit): an idle worker settles at once, a busy one in groups. Every settlement
keeps what it had alone: its own verdict, its own attempts and deadline (the worker's retry loop is
unchanged), reported only after the commit that holds it; a lost reply makes every settlement of
the group indeterminate, and each is resubmitted (a replay is answered `replayed`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from evidence_lib.engine import v2
from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.v2_groups import MAX_ITEMS, settle_all_sql, settled
from evidence_lib.workers.config import DeadlineExceeded
from evidence_lib.workers.connections import ConnectionSource, ConnectionUnavailable
from evidence_lib.workers.settlement import AttemptRecord

OPEN = sql.SQL("""begin;
select pg_current_xact_id()::text,
       set_config('statement_timeout',
                  greatest(1, floor(extract(epoch from {lease}::timestamptz - clock_timestamp())
                                    * 1000))::bigint::text,
                  true),
       extract(epoch from {lease}::timestamptz - clock_timestamp())::float8""")
Timed = Callable[[str], AbstractContextManager[None]]
Report = Callable[[Exception], None]  # the worker's error log


@dataclass
class _Item:
    attempt: int
    grant: v2.Grant
    outcome: v2.Outcome
    result: Json
    wait: float
    record: AttemptRecord = field(init=False)
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class GroupStats:
    groups: int = 0
    settlements: int = 0
    largest: int = 0


class SettleGroups:
    def __init__(self, pool: Callable[[], ConnectionSource], timed: Timed, report: Report,
                 accepted: Callable[[list[v2.Grant]], None] | None = None) -> None:  # fmt: skip
        """`pool()`: the worker's connections; `accepted`: told the grants of every group's
        accepted settlements after its commit (the worker's reconciler follows them up)."""
        self.pool, self.timed, self.report, self.accepted = pool, timed, report, accepted
        self.stats = GroupStats()
        self._lock = threading.Lock()
        self._pending: list[_Item] = []
        self._leading = False

    def attempt(self, attempt: int, grant: v2.Grant, outcome: v2.Outcome, result: Json, wait: float) -> AttemptRecord:
        """Settle `grant` in the next group; returns this settlement's attempt record."""
        item = _Item(attempt, grant, outcome, result, wait)
        with self._lock:
            self._pending.append(item)
            lead = not self._leading
            self._leading = True
        if lead:
            self._lead()
        item.done.wait()
        return item.record

    def _lead(self) -> None:
        while True:
            with self._lock:
                group, self._pending = self._pending[:MAX_ITEMS], self._pending[MAX_ITEMS:]
                if not group:
                    self._leading = False
                    return
            try:
                self._commit(group)
            finally:
                for item in group:
                    item.done.set()

    def _commit(self, group: list[_Item]) -> None:
        started = time.perf_counter()
        for item in group:
            item.record = AttemptRecord(item.attempt, "receipt", started_at=time.time())
        stage = "connect"
        earliest = min(group, key=lambda i: i.grant.lease_expires_at)
        xid: str | None = None
        try:
            with self.pool().connection(min(i.wait for i in group)) as conn:
                stage = "open"
                try:
                    with self.timed("settle.open"):
                        cur = conn.execute(OPEN.format(lease=sql.Literal(earliest.grant.lease_expires_at.isoformat())),
                                           prepare=False)  # fmt: skip
                        cur.nextset()  # past BEGIN
                        row = cur.fetchone()
                    assert row is not None
                    xid = str(row[0])
                    for item in group:
                        item.record.xid = xid
                    if float(row[2]) <= 0:
                        raise DeadlineExceeded(f"claim {earliest.grant.claim_id}: no time left by the server clock")
                    stage = "commit"  # the settlements and COMMIT travel together: a lost reply loses both
                    with self.timed("settle.v2_settle_all+commit"):
                        statement = sql.SQL("{}; commit").format(
                            settle_all_sql([(i.grant.claim_id, i.outcome, i.result) for i in group]))
                        rows = conn.execute(statement, prepare=False).fetchall()  # fmt: skip
                except BaseException:
                    if not conn.closed and not conn.broken:
                        conn.execute("rollback")
                    raise
        except ConnectionUnavailable as exc:
            self._all(group, "unreachable", str(exc).strip(), submitted=False)
        except (DeadlineExceeded, psycopg.errors.QueryCanceled) as exc:
            self._all(group, "deadline", str(exc).strip())
            self.report(DeadlineExceeded(f"a settlement group of {len(group)} (xid {xid}): {exc}"))
        except psycopg.OperationalError as exc:
            self._all(group, "transport_error", str(exc).strip(), indeterminate=stage == "commit")
        except psycopg.Error as exc:
            self._all(group, "rejected", f"[{exc.sqlstate}] {exc.diag.message_primary}")
        else:
            self._answer(group, rows)
        seconds = time.perf_counter() - started
        for item in group:
            item.record.seconds = seconds
        self.stats.groups += 1
        self.stats.settlements += len(group)
        self.stats.largest = max(self.stats.largest, len(group))

    def _answer(self, group: list[_Item], rows: list[Any]) -> None:
        accepted: list[v2.Grant] = []
        for item, answer in zip(group, settled(rows, len(group)), strict=True):
            if answer.refused is not None:
                item.record.result = "rejected"
                item.record.error = f"[{answer.refused.sqlstate}] {answer.refused.message}"
            else:
                item.record.verdict = answer.verdict
                if answer.verdict == "accepted":
                    accepted.append(item.grant)
        if accepted and self.accepted is not None:
            self.accepted(accepted)

    @staticmethod
    def _all(group: list[_Item], result: str, error: str, *, submitted: bool = True,
             indeterminate: bool = False) -> None:  # fmt: skip
        for item in group:
            item.record.result = result  # type: ignore[assignment]
            item.record.error = error
            item.record.submitted = submitted
            item.record.indeterminate = indeterminate
