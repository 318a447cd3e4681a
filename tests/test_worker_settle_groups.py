"""Group commit of settlements (`workers/settle_groups.py`), on the real engine: a lone settlement
commits at once; those that arrive while a group commits go together in the next group, one
transaction; each keeps its own verdict; a replay is `replayed`; a refused item, a server out of
reach and a horizon already passed each give the record they should. The order is forced by the
engine's hook lock, and proven in pg_locks."""

from __future__ import annotations

import contextlib
import datetime as dt
import threading
import uuid
from collections.abc import Callable, Iterator

from psycopg import conninfo

from evidence_lib.engine import v2
from evidence_lib.engine.flows import route
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.faults import held_hook
from evidence_lib.pg.db import Conn, connect, one
from evidence_lib.workers.config import DeadlineExceeded
from evidence_lib.workers.connections import ConnectionSource
from evidence_lib.workers.settle_groups import SettleGroups
from evidence_lib.workers.settlement import AttemptRecord

DEAD = "postgresql://postgres@/postgres?host=/nonexistent-socket-dir"
GUARD = 10.0  # seconds: a liveness guard only
HOOK = "settle.after_run_lock"


def _timed(_name: str) -> contextlib.AbstractContextManager[None]:
    return contextlib.nullcontext()


def _grants(conn: Conn, slug: str, n: int) -> list[v2.Grant]:
    flow = define_ab(conn, slug, "flow")
    out = []
    for i in range(n):
        run_id = v2.start_run(conn, slug, {"n": i})
        grant = v2.claim(conn, run_id, "A", route(flow, "A"), read_step_message(conn, flow, "A", run_id))
        assert grant is not None
        out.append(grant)
    return out


class Setup:
    def __init__(self, url: str) -> None:
        self.source = ConnectionSource(url, size=2, application_name="t_groups")
        self.reported: list[Exception] = []
        self.accepted: list[list[v2.Grant]] = []
        self.groups = SettleGroups(lambda: self.source, _timed, self.reported.append, self.accepted.append)


@contextlib.contextmanager
def _setup(url: str) -> Iterator[Setup]:
    s = Setup(url)
    try:
        yield s
    finally:
        s.source.close()


def _until(condition: Callable[[], bool]) -> bool:
    pause = threading.Event()
    for _ in range(int(GUARD / 0.01)):
        if condition():
            return True
        pause.wait(0.01)
    return False


def test_a_lone_settlement_commits_at_once_and_a_replay_is_replayed(conn: Conn, db_url: str) -> None:
    [grant] = _grants(conn, "glone", 1)
    with _setup(db_url) as s:
        first = s.groups.attempt(1, grant, "completed", {"a": 1}, GUARD)
        assert (first.attempt, first.result, first.verdict, first.submitted, first.indeterminate) == (
            1, "receipt", "accepted", True, False)  # fmt: skip
        assert first.xid and first.error is None and first.seconds > 0 and first.started_at > 0
        assert s.accepted == [[grant]]
        again = s.groups.attempt(2, grant, "completed", {"a": 1}, GUARD)
        assert (again.attempt, again.verdict) == (2, "replayed") and again.xid != first.xid
        assert s.accepted == [[grant]]  # a replay hands nothing to the follow-up reconciler
        assert (s.groups.stats.groups, s.groups.stats.settlements, s.groups.stats.largest) == (2, 2, 1)
    assert one(conn, "select status from engine.step_tasks where run_id = %s and step_slug = 'A'",
               (grant.run_id,)) == "completed"  # fmt: skip


def test_settlements_that_arrive_while_a_group_commits_go_together_in_the_next(conn: Conn, db_url: str) -> None:
    grants = _grants(conn, "ggroup", 3)
    armed = conninfo.make_conninfo(db_url, options=f"-c engine.hooks={HOOK}")
    records: dict[int, AttemptRecord] = {}
    with _setup(armed) as s, connect(db_url) as controller:

        def settle(i: int) -> None:
            records[i] = s.groups.attempt(1, grants[i], "completed", {"a": i}, GUARD)

        with held_hook(controller, HOOK):
            leader = threading.Thread(target=settle, args=(0,), daemon=True)
            leader.start()
            parked = "select count(*) from pg_locks where locktype = 'advisory' and classid = 7001 and not granted"
            assert _until(lambda: one(controller, parked) == 1), "the leader never parked at the hook"
            followers = [threading.Thread(target=settle, args=(i,), daemon=True) for i in (1, 2)]
            for t in followers:
                t.start()
            assert _until(lambda: len(s.groups._pending) == 2), "the two never queued behind the leader"
        for t in (leader, *followers):
            t.join(GUARD)
        assert sorted(records) == [0, 1, 2]
        assert [records[i].verdict for i in range(3)] == ["accepted"] * 3
        assert records[1].xid == records[2].xid != records[0].xid  # one transaction for the two
        assert [sorted(str(g.claim_id) for g in group) for group in s.accepted] == [
            [str(grants[0].claim_id)], sorted(str(grants[i].claim_id) for i in (1, 2))]  # fmt: skip
        assert (s.groups.stats.groups, s.groups.stats.settlements, s.groups.stats.largest) == (2, 3, 2)


def test_a_refused_item_is_rejected_alone(conn: Conn, db_url: str) -> None:
    [grant] = _grants(conn, "grefused", 1)
    unknown = v2.Grant(grant.run_id, "A", 0, grant.queue_name, 1, {}, uuid.uuid4(), grant.lease_expires_at)
    with _setup(db_url) as s:
        record = s.groups.attempt(1, unknown, "completed", {"a": 1}, GUARD)
        assert record.result == "rejected" and record.verdict is None
        assert record.error is not None and record.error.startswith("[DR")
        assert s.accepted == [] and s.reported == []


def test_a_server_out_of_reach_is_unreachable_and_nothing_was_submitted(conn: Conn) -> None:
    [grant] = _grants(conn, "gdead", 1)
    with _setup(DEAD) as s:
        record = s.groups.attempt(1, grant, "completed", {"a": 1}, 0.2)
    assert (record.result, record.submitted, record.xid, record.verdict) == ("unreachable", False, None, None)


def test_a_horizon_already_passed_by_the_server_clock_is_a_deadline(conn: Conn, db_url: str) -> None:
    [grant] = _grants(conn, "gpast", 1)
    past = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=5)
    late = v2.Grant(grant.run_id, "A", 0, grant.queue_name, grant.message_id, {}, grant.claim_id, past)
    with _setup(db_url) as s:
        record = s.groups.attempt(1, late, "completed", {"a": 1}, GUARD)
        assert record.result == "deadline" and record.xid and "no time left by the server clock" in str(record.error)
        [said] = s.reported
        assert isinstance(said, DeadlineExceeded) and "a settlement group of 1" in str(said)
    assert one(conn, "select count(*) from engine.task_settlements") == 0  # rolled back, nothing settled
