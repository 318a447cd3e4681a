"""The engine's SQLSTATEs: one registry (code and meaning) used by workers, tests and scenarios
instead of string literals. `tests/test_sqlstates.py` proves it equals the codes `sql/` raises
and the table in `docs/contract.md`."""

from __future__ import annotations

from enum import StrEnum


class SqlState(StrEnum):
    """An engine SQLSTATE; the value is the code PostgreSQL reports (`exc.sqlstate`)."""

    UNSUPPORTED_DEFINITION = "DR001"
    PAYLOAD_TOO_LARGE = "DR002"
    NOT_ONE_MESSAGE_ID = "DR003"
    IDENTITY_MISMATCH = "DR004"
    DEFINITION_CHANGED = "DR005"
    NOT_CLAIMABLE = "DR006"
    TAKEOVER_BEFORE_HORIZON = "DR007"
    ARGUMENT_OUT_OF_RANGE = "DR008"
    BAD_OUTCOME_OR_RESULT = "DR009"
    V1_WRITER_ON_V2 = "DR010"
    DEFINITION_LOCKED = "DR011"
    QUEUE_COLLISION = "DR012"
    UNKNOWN_CLAIM = "DR013"
    UNKNOWN_OBJECT = "DR014"
    V2_CALL_ON_V1_RUN = "DR015"
    DEFINITION_DIFFERS = "DR016"
    HOOK_FAILED = "DR900"

    @property
    def meaning(self) -> str:
        return MEANINGS[self]


MEANINGS: dict[SqlState, str] = {
    SqlState.UNSUPPORTED_DEFINITION: "unsupported definition or option",
    SqlState.PAYLOAD_TOO_LARGE: "payload too large",
    SqlState.NOT_ONE_MESSAGE_ID: "not exactly one message id",
    SqlState.IDENTITY_MISMATCH: "queue, message or step selector does not match the task's stored identity",
    SqlState.DEFINITION_CHANGED: "live definition differs from the run's",
    SqlState.NOT_CLAIMABLE: "task not claimable now",
    SqlState.TAKEOVER_BEFORE_HORIZON: "takeover before the lease horizon",
    SqlState.ARGUMENT_OUT_OF_RANGE: "argument out of range",
    SqlState.BAD_OUTCOME_OR_RESULT: "bad outcome or result",
    SqlState.V1_WRITER_ON_V2: "v1 writer refused on v2 state",
    SqlState.DEFINITION_LOCKED: "flow definition locked by active v2 runs",
    SqlState.QUEUE_COLLISION: "queue name collision or conflicting route",
    SqlState.UNKNOWN_CLAIM: "unknown claim",
    SqlState.UNKNOWN_OBJECT: "unknown flow, step or run",
    SqlState.V2_CALL_ON_V1_RUN: "v2 function called on a v1 run",
    SqlState.DEFINITION_DIFFERS: "flow or step defined again with different options",
    SqlState.HOOK_FAILED: "a test hook armed to fail (`engine.hooks = 'point:fail'`)",
}
