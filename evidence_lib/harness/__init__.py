"""The multi-session harness: named sessions and a controller that holds hook locks and proves
waits (`sessions`, `locks`), races written and run like PostgreSQL's isolation tester
(`isolation`: specs, every interleaving, normalized transcripts), whole-database snapshots (`snapshots`), real faults
(`faults`: lost acknowledgement, kill at a hook, dropped queue), the A -> B proof flow
(`ab_flow`) and waits that let a lease or backoff really pass (`waits`)."""

from evidence_lib.harness.sessions import Controller, Session

__all__ = ["Controller", "Session"]
