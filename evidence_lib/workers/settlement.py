"""What a v2 worker's settlement is made of: the one-round-trip attempt statement, and the
records of every attempt, every settlement and the worker's counts (read back by the evidence)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal
from uuid import UUID

from evidence_lib.engine import v2
from evidence_lib.engine.jsontypes import Json

AttemptResult = Literal["receipt", "transport_error", "unreachable", "deadline", "rejected"]
RESERVE = 0.3  # seconds kept before a claim's horizon for the last attempt to complete
RETRY_INITIAL = 0.05  # seconds before the second try of a settlement (doubling, with jitter)
RETRY_CAP = 1.0  # the longest pause between two tries of one settlement


@dataclass
class AttemptRecord:
    """One settlement attempt as the client saw it."""

    attempt: int
    result: AttemptResult
    xid: str | None = None
    verdict: str | None = None
    error: str | None = None
    indeterminate: bool = False  # the commit was sent and its reply never came
    seconds: float = 0.0
    submitted: bool = True  # the settlement reached a connection (counts against the bound)
    started_at: float = 0.0  # wall clock (time.time()) when the attempt began


@dataclass
class SettlementRecord:
    claim_id: UUID
    run_id: UUID
    step_slug: str
    outcome: v2.Outcome
    result: Json
    lease_expires_at: dt.datetime
    attempts: list[AttemptRecord] = field(default_factory=list)
    final: str = ""  # a verdict, or deadline_exceeded / rejected / gave_up / shutdown


@dataclass
class V2WorkerStats:
    read: int = 0
    granted: int = 0
    not_granted: int = 0
    left_intact: int = 0
    handler_errors: int = 0
    transport_errors: int = 0
    abandoned: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    settlements: list[SettlementRecord] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
