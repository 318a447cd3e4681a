"""The frozen v2 envelope (`engine.v2_limits()`), read into a typed, frozen object.

The fields are exactly the keys of `v2_limits()` and the fields of SQL type
`engine.v2_envelope`; reading a server whose limits have a key more or less is an error, so a
misspelt or renamed limit cannot read as a silent default.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from evidence_lib.errors import EvidenceError
from evidence_lib.pg.db import Conn


class LimitsMismatch(EvidenceError):
    """The server's v2_limits() names other limits than this library knows."""


@dataclass(frozen=True)
class Limits:
    """The v2 envelope (CONTRACT section 3)."""

    steps: int
    task_index: int
    max_attempts: int
    when_exhausted: str
    timeout_min_seconds: int
    timeout_max_seconds: int
    start_delay_a_seconds: int
    start_delay_b_min_seconds: int
    start_delay_b_max_seconds: int
    input_max_bytes: int
    result_max_bytes: int
    message_ids_per_call: int
    takeovers_per_task: int
    lease_grace_seconds: int
    reconcile_actions_default: int
    reconcile_actions_min: int
    reconcile_actions_max: int
    errors_before_attention: int
    backoff_base_seconds: int
    backoff_cap_seconds: int
    worker_settlement_attempts: int

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Limits:
        names = {f.name for f in fields(cls)}
        if set(value) != names:
            raise LimitsMismatch(
                f"v2_limits() has keys {sorted(set(value) - names)} this library does not know and lacks "
                f"{sorted(names - set(value))}"
            )
        return cls(**value)


def read_limits(conn: Conn) -> Limits:
    """`engine.v2_limits()` as a `Limits` (needs EXECUTE on it: the operator role has it)."""
    row = conn.execute("select engine.v2_limits()").fetchone()
    if row is None:
        raise LimitsMismatch("engine.v2_limits() returned no row")
    return Limits.from_json(row[0])
