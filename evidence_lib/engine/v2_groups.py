"""The group calls (`v2_claim_all`, `v2_settle_all`, `v2_reconcile_all`): several calls of one kind
in one transaction and one round trip, each the same call as alone in a subtransaction of its own,
answered item by item. A worker commits a whole read's claims at once, and every settlement whose
handler finished at once; its reconciler reconciles the runs it just settled at once."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from psycopg import sql

from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.v2 import Delivery, Grant, Outcome, Report
from evidence_lib.pg.db import Conn

MAX_ITEMS = 64  # per group call (DR008 beyond)


@dataclass(frozen=True)
class Refused:
    """An item whose call raised (its subtransaction rolled back: nothing written)."""

    sqlstate: str
    message: str


def claim_all(conn: Conn, deliveries: list[Delivery]) -> list[Grant | Refused | None]:
    """Claim every delivery in one transaction (one round trip, autocommit): per delivery, its
    grant, None (not claimable now: nothing written) or Refused (the claim's error)."""
    rows = conn.execute(
        "select * from engine.v2_claim_all(%s::uuid[], %s::text[], %s::text[], %s::bigint[])",
        ([d.run_id for d in deliveries], [d.step_slug for d in deliveries], [d.queue_name for d in deliveries],
         [d.message_id for d in deliveries]),
    ).fetchall()  # fmt: skip
    out: list[Grant | Refused | None] = [None] * len(deliveries)
    for item, claim_id, run_id, step, index, queue, message_id, input_, lease, state, text in rows:
        if state is not None:
            out[item - 1] = Refused(state, text)
        elif claim_id is not None:
            out[item - 1] = Grant(run_id=run_id, step_slug=step, task_index=index, queue_name=queue,
                                  message_id=message_id, input=input_, claim_id=claim_id, lease_expires_at=lease)
    return out


@dataclass(frozen=True)
class Settled:
    """One item of a settle group: the receipt's verdict and generation, or its refusal."""

    verdict: str | None
    generation: int | None
    refused: Refused | None = None


SETTLE_ALL = sql.SQL("select * from engine.v2_settle_all({claims}::uuid[], {outcomes}::text[], {results}::jsonb[])")


def settle_all_sql(items: list[tuple[UUID, Outcome, Json]]) -> sql.Composed:
    """The statement that settles `items` (claim, outcome, result), values quoted client-side (it
    rides in one simple query with the COMMIT, so a lost reply loses the whole group at once)."""
    return SETTLE_ALL.format(
        claims=sql.Literal([str(c) for c, _, _ in items]),
        outcomes=sql.Literal([o for _, o, _ in items]),
        results=sql.Literal([json.dumps(r, allow_nan=False) for _, _, r in items]),
    )


def settled(rows: list[tuple[Any, ...]], count: int) -> list[Settled]:
    """The rows of `v2_settle_all` as one Settled per item, in the order given."""
    out = [Settled(None, None, Refused("XX000", "no answer"))] * count
    for item, verdict, _claim, _outcome, _result, generation, _at, state, text in rows:
        out[item - 1] = Settled(verdict, generation, Refused(state, text) if state is not None else None)
    return out


def reconcile_all(conn: Conn, run_ids: list[UUID], max_actions: int = 8) -> list[Report | Refused]:
    """Reconcile every run in one transaction (one round trip, autocommit): per run, its report or
    Refused (its error)."""
    rows = conn.execute("select * from engine.v2_reconcile_all(%s::uuid[], %s)", (run_ids, max_actions)).fetchall()
    out: list[Report | Refused] = [Refused("XX000", "no answer")] * len(run_ids)
    for item, run_id, generation, actions, processed, health, status, state, text in rows:
        out[item - 1] = (Refused(state, text) if state is not None
                         else Report(run_id, generation, actions, processed, health, status))  # fmt: skip
    return out


def lease_left(lease: dt.datetime) -> float:
    return (lease - dt.datetime.now(dt.UTC)).total_seconds()
