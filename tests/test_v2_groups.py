"""The group calls: bad input refused whole with DR008 (nothing written), every item exactly the
single call in a subtransaction of its own (a refusal of one undoes no other), the engine's order
(ascending run id), and no reconcile inside a settlement group."""

from __future__ import annotations

from uuid import UUID, uuid4

import pytest

from evidence_lib.engine import v2
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.engine.v2 import Delivery, Grant
from evidence_lib.engine.v2_groups import Refused, claim_all, reconcile_all, settle_all_sql, settled
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.pg.db import Conn, rows
from tests.helpers import assert_refused, queue_messages, scalar
from tests.v2_helpers import Started, claim_a, start

CLAIM_ALL = "select * from engine.v2_claim_all(%s::uuid[], %s::text[], %s::text[], %s::bigint[])"
SETTLE_ALL = "select * from engine.v2_settle_all(%s::uuid[], %s::text[], %s::jsonb[])"
RECONCILE_ALL = "select * from engine.v2_reconcile_all(%s::uuid[], %s)"
X = "00000000-0000-4000-8000-000000000001"


@pytest.mark.parametrize(
    ("query", "params", "names"),
    [
        (CLAIM_ALL, (None, None, None, None), ("claims",)),
        (CLAIM_ALL, ([X, X], ["A"], ["q"], [1]), ("2 run ids", "1 steps")),
        (CLAIM_ALL, ([X] * 65, ["A"] * 65, ["q"] * 65, [1] * 65), ("65 run ids", "at most 64")),
        (SETTLE_ALL, ([X], ["completed", "failed"], ["{}"]), ("1 claims", "2 outcomes")),
        (SETTLE_ALL, ([X] * 65, ["completed"] * 65, ["{}"] * 65), ("65 claims", "at most 64")),
        (RECONCILE_ALL, ([X], 0), ("max_actions '0'",)),
        (RECONCILE_ALL, ([X], None), ("max_actions NULL",)),
        (RECONCILE_ALL, ([X] * 65, 8), ("65 run ids",)),
    ],
    ids=["claim_nulls", "claim_lengths", "claim_65", "settle_lengths", "settle_65", "reconcile_0",
         "reconcile_null", "reconcile_65"],
)
def test_a_malformed_group_is_refused_whole_with_dr008_and_writes_nothing(
    conn: Conn, query: str, params: tuple[object, ...], names: tuple[str, ...]
) -> None:
    start(conn)
    assert_refused(conn, query, params, SqlState.ARGUMENT_OUT_OF_RANGE, *names)


def _delivery(s: Started, msg: int | None = None) -> Delivery:
    return Delivery(s.run_id, "A", s.queue_a, s.msg_a if msg is None else msg)


def test_a_claim_group_grants_each_in_ascending_run_order_and_a_refusal_undoes_no_other(conn: Conn) -> None:
    s1, s2 = start(conn), start(conn)
    wrong = _delivery(s2, s2.msg_a + 1000)  # DR004: the message is not the task's
    answers = claim_all(conn, [_delivery(s2), wrong, _delivery(s1)])
    assert isinstance(answers[0], Grant) and isinstance(answers[2], Grant)
    assert isinstance(answers[1], Refused) and answers[1].sqlstate == SqlState.IDENTITY_MISMATCH
    given = [s2.run_id, s1.run_id, s2.run_id]  # already claimed: each call grants nothing, in the engine's order
    ran = [r["item"] for r in rows(conn, CLAIM_ALL.replace("*", "item"), (given, ["A"] * 3, [s1.queue_a] * 3, [0] * 3))]
    assert ran == sorted((1, 2, 3), key=lambda i: (str(given[i - 1]), i))  # ascending run id, then as given
    assert scalar(conn, "select count(*) from engine.task_claims where state = 'current'") == 2


def _settle(conn: Conn, items: list[tuple[UUID, str, object]]) -> list[tuple[str | None, str | None]]:
    got = settled(conn.execute(settle_all_sql(items)).fetchall(), len(items))  # type: ignore[arg-type]
    return [(s.verdict, s.refused.sqlstate if s.refused else None) for s in got]


def test_a_settlement_group_settles_each_alone_and_creates_no_b(conn: Conn) -> None:
    s1, s2 = start(conn), start(conn)
    g1, g2 = claim_a(conn, s1), claim_a(conn, s2)
    answers = _settle(conn, [(g1.claim_id, "completed", {"a": 1}), (uuid4(), "completed", {}),
                             (g2.claim_id, "done", {}), (g2.claim_id, "failed", "boom")])  # fmt: skip
    assert answers == [("accepted", None), (None, SqlState.UNKNOWN_CLAIM), (None, SqlState.BAD_OUTCOME_OR_RESULT),
                       ("accepted", None)]  # fmt: skip
    assert queue_messages(conn, s1.queue_a) == []  # both of A's messages archived with their settlements
    assert scalar(conn, "select count(*) from engine.step_tasks where step_slug = 'B'") == 0
    assert queue_messages(conn, s1.queue_b) == []  # B is created only by a later reconcile
    before = snapshot(conn)
    again = _settle(conn, [(g2.claim_id, "failed", "boom"), (g1.claim_id, "completed", {"a": 1})])
    assert again == [("replayed", None), ("replayed", None)]
    assert diff(before, snapshot(conn)) == {}  # the lost group replayed: exact, nothing written


def test_a_reconcile_group_isolates_an_engine_error_to_its_run(conn: Conn) -> None:
    healthy, poisoned = start(conn, "step", "healthy"), start(conn, "step", "poison")
    for s in (healthy, poisoned):
        v2.settle(conn, claim_a(conn, s).claim_id, "completed", {"a": 1})
    conn.execute("select pgmq.drop_queue('poison__b')")  # behind the engine's back
    reports = reconcile_all(conn, [poisoned.run_id, healthy.run_id, healthy.run_id])
    assert not isinstance(reports[0], Refused) and reports[0].health == "backoff"
    assert not isinstance(reports[1], Refused) and reports[1].actions == 1
    assert not isinstance(reports[2], Refused) and reports[2].actions == 0  # the duplicate: nothing left to do
    assert len(queue_messages(conn, healthy.queue_b)) == 1
    errors = rows(conn, "select run_id, action from engine.engine_errors")
    assert errors == [{"run_id": poisoned.run_id, "action": "dispatch_b"}]
    assert scalar(conn, "select count(*) from engine.step_tasks where step_slug = 'B'") == 1
