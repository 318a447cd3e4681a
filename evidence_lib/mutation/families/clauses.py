"""Clauses (Tuya et al.'s SC family): each conjunct of a WHERE, HAVING or JOIN condition removed,
an ORDER BY removed (it orders locks or results), a LIMIT changed (to one more and one less,
and removed)."""

from __future__ import annotations

from collections.abc import Iterator

from pglast import ast
from pglast.enums import BoolExprType

from evidence_lib.mutation.families import ExprContext
from evidence_lib.mutation.sqltree import REMOVED, NodeChange, Path, Removed, slots, walk


def _conjunct_sites(root: ast.Node) -> Iterator[tuple[Path, ast.Node]]:
    """The condition attributes of every statement and join: (path to the condition, node)."""
    for path, node in walk(root):
        for attr in ("whereClause", "havingClause", "quals"):
            cond = getattr(node, attr, None) if attr in slots(node) else None
            if isinstance(cond, ast.Node):
                yield (*path, (attr, None)), cond


def _drop(node: ast.Node) -> ast.Node | Removed:
    return REMOVED


def _true(node: ast.Node) -> ast.Node:
    return ast.A_Const(isnull=False, val=ast.Boolean(boolval=True))


def conjuncts(ctx: ExprContext) -> Iterator[NodeChange]:
    for path, cond in _conjunct_sites(ctx.root):
        if isinstance(cond, ast.BoolExpr) and cond.boolop == BoolExprType.AND_EXPR:
            for i, arg in enumerate(cond.args or ()):
                yield NodeChange(f"ConjunctRemoved{i + 1}", (*path, ("args", i)), _drop, getattr(arg, "location", None))
        elif path[-1][0] == "quals":  # a join needs a condition: the only one becomes true
            yield NodeChange("JoinConditionToTrue", path, _true, getattr(cond, "location", None))
        else:
            yield NodeChange("WhereRemoved", path, _drop, getattr(cond, "location", None))


def _no_sort(node: ast.Node) -> ast.Node:
    assert isinstance(node, ast.SelectStmt)
    node.sortClause = None
    return node


def _limit(delta: int | None):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node | Removed:
        if delta is None:
            return REMOVED
        assert isinstance(node, ast.A_Const) and isinstance(node.val, ast.Integer)
        return ast.A_Const(isnull=False, val=ast.Integer(ival=int(node.val.ival or 0) + delta))

    return build


def order_and_limit(ctx: ExprContext) -> Iterator[NodeChange]:
    for path, node in walk(ctx.root):
        if isinstance(node, ast.SelectStmt) and node.sortClause:
            yield NodeChange("OrderByRemoved", path, _no_sort, None)
        if isinstance(node, ast.SelectStmt) and node.limitCount is not None:
            limit = (*path, ("limitCount", None))
            count = node.limitCount
            if isinstance(count, ast.A_Const) and isinstance(count.val, ast.Integer):
                yield NodeChange("LimitPlusOne", limit, _limit(1), None)
                if int(count.val.ival or 0) > 0:
                    yield NodeChange("LimitMinusOne", limit, _limit(-1), None)
            yield NodeChange("LimitRemoved", limit, _limit(None), None)
