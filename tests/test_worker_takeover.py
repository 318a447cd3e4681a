"""The operator's takeover (`workers/takeover.py`), on the real engine: the expired claims oldest
first and filtered by flow, a takeover only for a flow whose handler is given, each outcome's
row and the report's counts, a takeover of a claim that is no longer current refused, and one
warning line per takeover."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from evidence_lib.engine import v2
from evidence_lib.engine.flows import Flow
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.waits import wait_for_lease_expiry
from evidence_lib.pg.db import Conn, one
from evidence_lib.workers import takeover
from evidence_lib.workers.takeover import expired_claims, take_over_expired


def _claimed(conn: Conn, slug: str) -> tuple[Flow[Any], v2.Grant]:
    flow = define_ab(conn, slug, "flow", timeout=1)  # lease horizon: claim + 3 s
    run_id = v2.start_run(conn, slug, {"n": 1})
    grant = v2.claim(conn, run_id, "A", slug, read_step_message(conn, flow, "A", run_id))
    assert grant is not None
    return flow, grant  # type: ignore[return-value]


def test_expired_claims_are_listed_oldest_first_taken_over_per_flow_and_reported(
    conn: Conn, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    flow_a, first = _claimed(conn, "tka")
    _, second = _claimed(conn, "tkb")
    wait_for_lease_expiry(conn, second.claim_id)  # the later horizon: both have passed
    listed = expired_claims(conn)
    assert [c.claim_id for c in listed] == [first.claim_id, second.claim_id]
    assert all(c.overdue_seconds > 0 and c.step_slug == "A" for c in listed)
    assert (listed[0].flow_slug, listed[0].run_id, listed[0].message_id) == ("tka", first.run_id, first.message_id)
    assert [c.claim_id for c in expired_claims(conn, "tkb")] == [second.claim_id]

    with caplog.at_level(logging.WARNING, logger="t.takeover"):
        only_a = take_over_expired(db_url, flows={"tka": flow_a}, flow_slug="tka", log=logging.getLogger("t.takeover"))
    [taken] = only_a.outcomes
    assert (taken.outcome, taken.verdict) == ("taken_over", "accepted") and taken.new_claim is not None
    row = taken.row()
    assert row["run_id"] == str(first.run_id) and row["flow"] == "tka" and row["step"] == "A"
    assert row["expired_claim"] == str(first.claim_id) and row["new_claim"] == str(taken.new_claim)
    assert row["outcome"] == "taken_over" and row["settlement"] == "accepted" and float(str(row["overdue_s"])) > 0
    assert taken.detail == "handler ran for the new claim: accepted"
    [said] = [r.getMessage() for r in caplog.records if r.name == "t.takeover"]
    assert said.startswith(f"takeover {first.claim_id}: ")
    assert one(conn, "select status from engine.step_tasks where run_id = %s and step_slug = 'A'",
               (first.run_id,)) == "completed"  # fmt: skip

    left = take_over_expired(db_url, flows={"tka": flow_a})  # tkb's handler is not given
    [skipped] = left.outcomes
    assert skipped.outcome == "no_handler" and skipped.claim.claim_id == second.claim_id
    assert skipped.detail.startswith("no handler for flow tkb")
    assert (left.count("no_handler"), left.count("taken_over")) == (1, 0)
    assert skipped.row()["new_claim"] == "" and skipped.row()["settlement"] == ""
    assert one(conn, "select state from engine.task_claims where claim_id = %s", (second.claim_id,)) == "current"

    gone = takeover._take_over(conn, db_url, flow_a, listed[0])  # that claim was revoked by the takeover
    assert gone.outcome == "refused" and gone.detail.startswith("[DR") and gone.new_claim is None
