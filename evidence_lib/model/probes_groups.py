"""Probes of the group calls' own refusals: a group is refused whole with DR008 (nothing written)
when its arrays are null, of different lengths or longer than 64, and accepted at 64 (each item
then answers for itself: here every item names a run or claim the engine does not know, so each
is refused alone and nothing is written either way)."""

from __future__ import annotations

from typing import Any

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.model.ops import Op, call
from evidence_lib.model.probes_defs import Checker
from evidence_lib.model.reference import Model, Outcome, Window
from evidence_lib.pg.db import Conn

UNKNOWN = "00000000-0000-4000-8000-0000000000cc"
LIMIT = 64
CALLS = {
    "claim_all": "select count(*) from engine.v2_claim_all(%s::uuid[], %s::text[], %s::text[], %s::bigint[])",
    "settle_all": "select count(*) from engine.v2_settle_all(%s::uuid[], %s::text[], %s::jsonb[])",
}
RECONCILE_ALL = "select count(*) from engine.v2_reconcile_all(%s::uuid[], %s)"


def _arrays(kind: str, sizes: tuple[int | None, ...]) -> tuple[Any, ...]:
    fill: dict[str, tuple[Any, ...]] = {"claim_all": (UNKNOWN, "A", "q", 1), "settle_all": (UNKNOWN, "completed", "{}")}
    return tuple(None if n is None else [value] * n for value, n in zip(fill[kind], sizes, strict=True))


def sized(kind: str, sizes: tuple[int | None, ...]) -> Op:
    """`kind` called with arrays of `sizes` (None: SQL NULL): DR008 unless every array has the same
    length of at most 64; otherwise one answer per item and nothing written."""
    statement, params = CALLS[kind], _arrays(kind, sizes)

    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (Outcome("value", conn.execute(statement, params).fetchone()[0]), None))  # type: ignore[index]

    def model(m: Model, ids: Any, now: Window) -> Outcome:
        if None in sizes or len(set(sizes)) > 1 or (sizes[0] or 0) > LIMIT:
            return Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE)
        return Outcome("value", sizes[0])

    return Op(kind, f"{kind} with arrays of {list(sizes)} items", real, model)


def reconcile_sized(size: int | None, max_actions: int | None) -> Op:
    params = (None if size is None else [UNKNOWN] * size, max_actions)

    def real(conn: Conn) -> tuple[Outcome, Any]:
        return call(conn, lambda: (Outcome("value", conn.execute(RECONCILE_ALL, params).fetchone()[0]), None))  # type: ignore[index]

    def model(m: Model, ids: Any, now: Window) -> Outcome:
        if size is None or size > LIMIT or max_actions is None or not 1 <= max_actions <= 64:
            return Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE)
        return Outcome("value", size)

    return Op("reconcile_all", f"reconcile_all with {size} runs, max_actions {max_actions}", real, model)


def group_sizes(m: Checker) -> None:
    claim: tuple[tuple[int | None, ...], ...]
    settle: tuple[tuple[int | None, ...], ...]
    claim = ((LIMIT, LIMIT, LIMIT, LIMIT), (LIMIT + 1,) * 4, (2, 1, 2, 2), (2, 2, 1, 2), (2, 2, 2, 1),
             (None, 1, 1, 1), (1, None, 1, 1), (1, 1, None, 1), (1, 1, 1, None))  # fmt: skip
    settle = ((LIMIT,) * 3, (LIMIT + 1,) * 3, (2, 1, 2), (2, 2, 1), (None, 1, 1), (1, None, 1), (1, 1, None))
    for sizes in claim:
        m.check(sized("claim_all", sizes))
    for three in settle:
        m.check(sized("settle_all", three))
    for size, max_actions in ((LIMIT, 1), (LIMIT, 64), (LIMIT + 1, 8), (None, 8), (1, 0), (1, 65), (1, None)):
        m.check(reconcile_sized(size, max_actions))
