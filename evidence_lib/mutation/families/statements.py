"""Statements (PIT's VOID_METHOD_CALLS and RETURN_VALS in spirit; SPMutation's statement
deletion): each statement of a body deleted (every PERFORM, UPDATE, INSERT, DELETE, SELECT INTO,
assignment, RAISE, RETURN and PGMQ call), each assignment of an `update ... set` list removed,
and an early RETURN inserted after each guard (an IF that raises or returns)."""

from __future__ import annotations

import random
from collections.abc import Iterator

from pglast import ast

from evidence_lib.mutation.families import ExprContext, TextChange
from evidence_lib.mutation.plpgsql import Body
from evidence_lib.mutation.sqltree import REMOVED, NodeChange, Removed, walk

HIGHER_ORDER_PER_FUNCTION = 4  # pairs sampled per function, seeded by its name
DELETABLE = ("perform", "execsql", "assign", "raise", "return", "return_next", "dynexecute", "exit", "sql")


def _what(body: Body, start: int) -> str:
    """A short name for the deleted statement (`Perform`, `Update`, `PgmqCall` ...)."""
    words = body.fn.text[start : start + 200].lower().split()
    first = words[0] if words else "statement"
    if "pgmq." in body.fn.text[start : start + 200].split(";")[0]:
        return "PgmqCallDeleted"
    return f"{first.capitalize()}Deleted"


def _empty_return(body: Body) -> str:
    fn = body.fn
    if fn.returns == "trigger":
        return "return new;"
    if fn.returns_set or fn.returns.lower() == "void":
        return "return;"
    return "return null;"


def deletions(body: Body) -> Iterator[TextChange]:
    statements = list(body.walk())
    if body.fn.language == "sql" and len(statements) < 2:
        return
    for i, stmt in enumerate(statements):
        if stmt.kind in DELETABLE:
            yield TextChange(_what(body, stmt.start), stmt.start, stmt.end, "null;" if stmt.kind != "sql" else "",
                             f"s{i}:delete")  # fmt: skip


def early_returns(body: Body) -> Iterator[TextChange]:
    for i, stmt in enumerate(body.walk()):
        if stmt.is_guard and not _returns_next(body, stmt.end):
            yield TextChange("EarlyReturnAfterGuard", stmt.end, stmt.end, f"\n  {_empty_return(body)}", f"s{i}:return")


def _returns_next(body: Body, offset: int) -> bool:
    """Whether the statement after `offset` is already a RETURN (an early one there changes nothing)."""
    rel = offset - body.fn.body_start
    following = next((t for t in body.tokens if t.start >= rel), None)
    return following is not None and body.fn.text[body.fn.body_start + following.start:
                                                     body.fn.body_start + following.end + 1].lower() == "return"


def _drop(node: ast.Node) -> ast.Node | Removed:
    return REMOVED


def set_assignments(ctx: ExprContext) -> Iterator[NodeChange]:
    for path, node in walk(ctx.root):
        if isinstance(node, ast.UpdateStmt) and node.targetList and len(node.targetList) > 1:
            for i, target in enumerate(node.targetList):
                yield NodeChange(f"SetAssignmentRemoved:{target.name}", (*path, ("targetList", i)), _drop,
                                 target.location)  # fmt: skip


def pairs(body: Body) -> Iterator[tuple[TextChange, TextChange]]:
    """Two statements of one function deleted together (a higher-order mutant: a defect spread over
    two statements, which one deletion alone may not show): a sample seeded by the function's
    name, at most HIGHER_ORDER_PER_FUNCTION, from pairs of the same kind (two resets, two
    updates, two inserts) and from a guard with the lock taken before it."""
    deleted = list(deletions(body))
    statements = list(body.walk())
    guards = [TextChange("GuardDeleted", st.start, st.end, "null;", f"s{i}:guard")
              for i, st in enumerate(statements) if st.kind == "if" and st.is_guard]  # fmt: skip
    locks = [d for d in deleted if " for update" in body.fn.text[d.start : d.end].lower()
             or " for no key update" in body.fn.text[d.start : d.end].lower()]  # fmt: skip
    same = [(a, b) for i, a in enumerate(deleted) for b in deleted[i + 1 :]
            if a.operator == b.operator and a.end <= b.start]  # fmt: skip
    guarded = [(lock, guard) for lock in locks for guard in guards if lock.end <= guard.start]
    candidates = same + guarded
    rng = random.Random(body.fn.name)
    yield from sorted(rng.sample(candidates, min(len(candidates), HIGHER_ORDER_PER_FUNCTION)),
                      key=lambda p: (p[0].start, p[1].start))  # fmt: skip
