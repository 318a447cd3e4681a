"""v2_claim: singleton and identity rules before any write, eligibility, exact message ids."""

from __future__ import annotations

from typing import Any

import pytest

from evidence_lib.engine import v1, v2
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.ab_flow import read_step_message
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.pg.db import Conn, rows
from tests.helpers import assert_refused, scalar
from tests.v2_helpers import claim_a, start

CLAIM = "select * from engine.v2_claim(%s, %s, %s, %s::bigint[])"
TAKE = "select * from engine.v2_take_over(%s, %s, gen_random_uuid(), %s, %s::bigint[])"


@pytest.mark.parametrize(
    "ids",
    ["{}", "{1,2}", "{5,5}", "{NULL}", None, "{{5}}"],
    ids=["empty", "two", "duplicate", "null-element", "null-array", "2-d"],
)
@pytest.mark.parametrize("call", [CLAIM, TAKE], ids=["claim", "take_over"])
def test_not_exactly_one_message_id_fails_before_any_write(conn: Conn, call: str, ids: str | None) -> None:
    s = start(conn)
    assert_refused(conn, call, (s.run_id, "A", s.queue_a, ids), SqlState.NOT_ONE_MESSAGE_ID, str(s.run_id))


@pytest.mark.parametrize("mode", ["flow", "step"])
def test_wrong_queue_message_or_step_fails_without_queue_writes(conn: Conn, mode: str) -> None:
    s = start(conn, mode)  # type: ignore[arg-type]
    other = start(conn, mode, "other")  # type: ignore[arg-type]
    assert other.msg_a == s.msg_a  # the same numeric id lives in another queue
    cases: list[tuple[Any, ...]] = [
        (s.run_id, "A", other.queue_a, [s.msg_a]),  # wrong queue, same numeric id
        (s.run_id, "A", s.queue_a, [s.msg_a + 1000]),  # wrong message
        (s.run_id, "B", s.queue_a, [s.msg_a]),  # wrong step (B has no task yet)
        (other.run_id, "A", s.queue_a, [s.msg_a]),  # the other run with this queue
    ]
    for args in cases:
        assert_refused(conn, CLAIM, args, SqlState.IDENTITY_MISMATCH, str(args[0]))
        assert_refused(conn, TAKE, args, SqlState.IDENTITY_MISMATCH, str(args[0]))


def test_unknown_run_step_and_v1_run(conn: Conn) -> None:
    s = start(conn)
    assert_refused(
        conn, "select * from engine.v2_claim(gen_random_uuid(), 'A', 'ab', '{1}')", None, SqlState.UNKNOWN_OBJECT
    )
    assert_refused(conn, CLAIM, (s.run_id, "Z", s.queue_a, [s.msg_a]), SqlState.UNKNOWN_OBJECT, "Z")
    v1_run = v1.start_flow(conn, "ab", {})
    assert_refused(conn, CLAIM, (v1_run, "A", "ab", [s.msg_a + 1]), SqlState.V2_CALL_ON_V1_RUN, str(v1_run))


@pytest.mark.parametrize("mode", ["flow", "step"])
def test_a_grant_writes_the_claim_and_sets_vt_to_the_lease_horizon(conn: Conn, mode: str) -> None:
    s = start(conn, mode, timeout=42)  # type: ignore[arg-type]
    grant = claim_a(conn, s)
    assert (
        grant.run_id,
        grant.step_slug,
        grant.task_index,
        grant.queue_name,
        grant.message_id,
        grant.input,
    ) == (s.run_id, "A", 0, s.queue_a, s.msg_a, {"n": 1})
    [claim] = rows(conn, "select * from engine.task_claims")
    assert claim["claim_id"] == grant.claim_id and claim["state"] == "current" and claim["attempt"] == 1
    assert (claim["timeout"], claim["max_attempts"], claim["start_delay"]) == (42, 1, 0)
    assert claim["lease_expires_at"] == grant.lease_expires_at
    assert scalar(conn, "select lease_expires_at - claimed_at = interval '44 seconds' from engine.task_claims")
    assert scalar(conn, f"select vt from pgmq.q_{s.queue_a} where msg_id = %s", (s.msg_a,)) == grant.lease_expires_at
    task = rows(conn, "select status, attempts_count, started_at from engine.step_tasks")[0]
    assert (task["status"], task["attempts_count"], task["started_at"]) == ("started", 1, claim["claimed_at"])
    assert v2.claim(conn, s.run_id, "A", s.queue_a, s.msg_a) is None  # not claimable twice


@pytest.mark.parametrize(
    "state",
    [
        "update engine.run_work set requested_generation = 1",  # dirty work
        "update engine.run_work set health = 'backoff', next_attempt_at = now() + interval '1 hour'",
        "update engine.run_work set health = 'attention', attention_reason = 'test'",
        "update engine.runs set status = 'failed', failed_at = now()",  # terminal run
    ],
    ids=["dirty", "backoff", "attention", "terminal"],
)
def test_ineligible_runs_refuse_claims_with_no_queue_effect(conn: Conn, state: str) -> None:
    s = start(conn)
    conn.execute(state)  # the state is set up directly; the claim's refusal is what is tested
    before = snapshot(conn)
    assert conn.execute(CLAIM, (s.run_id, "A", s.queue_a, [s.msg_a])).fetchall() == []
    assert diff(before, snapshot(conn)) == {}  # no grant, no write, no vt change


def test_definition_mismatch_refuses_claim_and_reconcile(conn: Conn) -> None:
    s = start(conn)
    conn.execute("update engine.steps set timeout = 5 where step_slug = 'A'")  # behind the engine's back
    assert_refused(conn, CLAIM, (s.run_id, "A", s.queue_a, [s.msg_a]), SqlState.DEFINITION_CHANGED, str(s.run_id), "ab")
    assert_refused(
        conn, "select * from engine.v2_reconcile(%s)", (s.run_id,), SqlState.DEFINITION_CHANGED, str(s.run_id)
    )


def test_message_ids_beyond_2_pow_53_stay_exact(conn: Conn) -> None:
    big = 2**53 + 1
    s0 = start(conn, "step", "big")
    conn.execute(f"alter table pgmq.q_big__a alter column msg_id restart with {big}")  # test setup
    conn.execute(f"alter table pgmq.q_big__b alter column msg_id restart with {big + 2}")
    run_id = v2.start_run(conn, "big", {"x": 1})
    msg = read_step_message(conn, s0.flow, "A", run_id)
    assert msg == big
    grant = v2.claim(conn, run_id, "A", "big__a", big)
    assert grant is not None and grant.message_id == big
    v2.settle(conn, grant.claim_id, "completed", {"id": big})
    v2.reconcile(conn, run_id)
    msg_b = read_step_message(conn, s0.flow, "B", run_id)
    assert msg_b == big + 2
    grant_b = v2.claim(conn, run_id, "B", "big__b", msg_b)
    assert grant_b is not None and grant_b.input == {"run": {"x": 1}, "A": {"id": big}}
    assert scalar(conn, "select message_id::text from engine.task_claims where step_slug = 'B'") == str(big + 2)
