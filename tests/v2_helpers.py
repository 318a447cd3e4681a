"""Helpers for the v2 tests: a started run with A's message reserved, claims, lease expiry."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from evidence_lib.engine import v2
from evidence_lib.engine.flows import AnyFlow, QueueMode, route
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.pg.db import Conn


@dataclass
class Started:
    flow: AnyFlow
    run_id: UUID
    queue_a: str
    queue_b: str
    msg_a: int


def start(conn: Conn, mode: QueueMode = "flow", slug: str = "ab", **options: int) -> Started:
    flow = define_ab(conn, slug, mode, **options)
    run_id = v2.start_run(conn, slug, {"n": 1})
    msg = read_step_message(conn, flow, "A", run_id)
    return Started(flow, run_id, route(flow, "A"), route(flow, "B"), msg)


def claim_a(conn: Conn, s: Started) -> v2.Grant:
    grant = v2.claim(conn, s.run_id, "A", s.queue_a, s.msg_a)
    assert grant is not None
    return grant


def through_b_claim(conn: Conn, s: Started) -> v2.Grant:
    """Settle A, reconcile, claim B."""
    v2.settle(conn, claim_a(conn, s).claim_id, "completed", {"a": 1})
    v2.reconcile(conn, s.run_id)
    msg_b = read_step_message(conn, s.flow, "B", s.run_id)
    grant = v2.claim(conn, s.run_id, "B", s.queue_b, msg_b)
    assert grant is not None
    return grant
