"""Errors: each RAISE's SQLSTATE swapped for another code of our registry (the next one, in
registry order, so each raise gets exactly one mutant and a reviewer can predict it)."""

from __future__ import annotations

from collections.abc import Iterator

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.mutation.families import TextChange
from evidence_lib.mutation.plpgsql import Body

REGISTRY = [s.value for s in SqlState if s is not SqlState.HOOK_FAILED]


def swapped(code: str) -> str:
    """The code a raise of `code` is mutated to: the next one of the registry (DR016 -> DR001);
    a code outside the registry (a PostgreSQL condition) becomes the registry's first."""
    if code in REGISTRY:
        return REGISTRY[(REGISTRY.index(code) + 1) % len(REGISTRY)]
    return REGISTRY[0]


def sqlstates(body: Body) -> Iterator[TextChange]:
    for i, expr in enumerate(body.exprs):
        if expr.role != "errcode":
            continue
        literal = body.fn.text[expr.start : expr.end]
        code = literal.strip("'")
        other = swapped(code)
        yield TextChange(f"{code}To{other}", expr.start, expr.end, f"'{other}'", f"e{i}:errcode")
