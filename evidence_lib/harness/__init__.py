"""The multi-session harness: named sessions and a controller that holds hook locks and proves
waits (`sessions`, `locks`), a race runner whose output reads like a PostgreSQL isolation-tester
transcript (`race`, `transcript`), whole-database snapshots (`snapshots`), real faults
(`faults`: lost acknowledgement, kill at a hook, dropped queue), the A -> B proof flow
(`ab_flow`) and waits that let a lease or backoff really pass (`waits`)."""

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
