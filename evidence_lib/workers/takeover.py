"""The controlled takeover, for operators: claims past their lease horizon, each taken over once.

A claim whose worker died (or whose settlement could not reach the server before its horizon)
stays current forever: no worker may claim its task again. The contract's way out is a
controlled takeover (`engine.v2_take_over`): after the horizon it revokes the old claim and
grants a new one to the caller, at most once per task; a task that already used its takeover
gets health `attention` instead (reported with its reason). The caller of a takeover owns the new
claim, so it must run the step's handler: `take_over_expired` does, with the flow definitions it
is given. There is no automatic worker-loss policy: this runs only when an operator runs it
(`python -m evidence_lib takeover --expired`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal
from uuid import UUID

import psycopg

from evidence_lib.engine import v2
from evidence_lib.engine.flows import AnyFlow
from evidence_lib.pg.db import Conn, connect
from evidence_lib.workers.v2 import V2Worker

Outcome = Literal["would_take_over", "taken_over", "attention", "refused", "no_handler"]

EXPIRED = """
select c.run_id, r.flow_slug, c.step_slug, c.claim_id, c.queue_name, c.message_id, c.lease_expires_at,
       extract(epoch from clock_timestamp() - c.lease_expires_at)::float8 as overdue_seconds
  from engine.task_claims c
  join engine.step_tasks t using (run_id, step_slug, task_index)
  join engine.runs r using (run_id)
 where c.state = 'current' and t.status = 'started' and r.status = 'started'
   and c.lease_expires_at < clock_timestamp()
   and (%(flow)s::text is null or r.flow_slug = %(flow)s)
 order by c.lease_expires_at, c.run_id
"""


@dataclass(frozen=True)
class ExpiredClaim:
    run_id: UUID
    flow_slug: str
    step_slug: str
    claim_id: UUID
    queue_name: str
    message_id: int
    lease_expires_at: datetime
    overdue_seconds: float


@dataclass
class TakeoverOutcome:
    claim: ExpiredClaim
    outcome: Outcome
    new_claim: UUID | None = None
    verdict: str | None = None
    detail: str = ""

    def row(self) -> dict[str, object]:
        return {
            "run_id": str(self.claim.run_id),
            "flow": self.claim.flow_slug,
            "step": self.claim.step_slug,
            "expired_claim": str(self.claim.claim_id),
            "overdue_s": round(self.claim.overdue_seconds, 1),
            "outcome": self.outcome,
            "new_claim": str(self.new_claim) if self.new_claim else "",
            "settlement": self.verdict or "",
            "detail": self.detail,
        }


@dataclass
class TakeoverReport:
    outcomes: list[TakeoverOutcome] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        return sum(1 for o in self.outcomes if o.outcome == outcome)


def expired_claims(conn: Conn, flow_slug: str | None = None) -> list[ExpiredClaim]:
    """The current claims of started tasks whose lease horizon has passed, oldest first."""
    rows = conn.execute(EXPIRED, {"flow": flow_slug}).fetchall()
    return [ExpiredClaim(*r) for r in rows]


def take_over_expired(
    url: str,
    *,
    flows: Mapping[str, AnyFlow] | None = None,
    flow_slug: str | None = None,
    dry_run: bool = False,
    log: logging.Logger | None = None,
) -> TakeoverReport:
    """Take each expired claim over once and run its handler (from `flows`, by flow slug) for
    the new claim; with `dry_run`, only list them. A task that used its takeover is reported
    with the `attention` reason the engine recorded."""
    log = log or logging.getLogger("evidence_lib.takeover")
    report = TakeoverReport()
    with connect(url, application_name="operator_takeover") as conn:
        for claim in expired_claims(conn, flow_slug):
            flow = (flows or {}).get(claim.flow_slug)
            if dry_run:
                report.outcomes.append(TakeoverOutcome(claim, "would_take_over", detail="dry run"))
                continue
            if flow is None:
                detail = f"no handler for flow {claim.flow_slug}: not taken over (the new claim would have no worker)"
                report.outcomes.append(TakeoverOutcome(claim, "no_handler", detail=detail))
                continue
            report.outcomes.append(_take_over(conn, url, flow, claim))
            log.warning("takeover %s: %s", claim.claim_id, report.outcomes[-1].row())
    return report


def _take_over(conn: Conn, url: str, flow: AnyFlow, claim: ExpiredClaim) -> TakeoverOutcome:
    try:
        grant = v2.take_over(conn, claim.run_id, claim.step_slug, claim.claim_id, claim.queue_name, claim.message_id)
    except psycopg.Error as exc:  # settled or taken over meanwhile: nothing to do
        return TakeoverOutcome(claim, "refused", detail=f"[{exc.sqlstate}] {exc.diag.message_primary}")
    if grant is None:
        reason = v2.work_row(conn, claim.run_id).get("attention_reason") or ""
        return TakeoverOutcome(claim, "attention", detail=str(reason))
    step = claim.step_slug if flow.queue_mode == "step" else None
    with V2Worker.serving(url, flow, step, name="operator_takeover") as worker:
        record = worker.execute(grant)
    verdict = record.final if record else "not settled"
    return TakeoverOutcome(claim, "taken_over", grant.claim_id, verdict, f"handler ran for the new claim: {verdict}")
