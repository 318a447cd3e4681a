"""The barrier harness: named sessions, a controller that holds hook locks and proves waits,
and a race runner whose output reads like a PostgreSQL isolation-tester transcript."""

from evidence_lib.harness.race import Check, Race, RaceContext, SessionSpec, Step, run_race
from evidence_lib.harness.sessions import Controller, Session
from evidence_lib.harness.transcript import PermutationRun, RaceResult

__all__ = [
    "Check",
    "Controller",
    "PermutationRun",
    "Race",
    "RaceContext",
    "RaceResult",
    "Session",
    "SessionSpec",
    "Step",
    "run_race",
]
