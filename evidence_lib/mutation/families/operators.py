"""Operator replacement (Tuya et al.'s ROR/AOR/LCR; PIT's CONDITIONALS_BOUNDARY, NEGATE_CONDITIONALS,
MATH): relational operators by their neighbours, `is [not] distinct from`, `between`, `in`,
arithmetic operators, `and`/`or`, `not` removed; every condition negated and replaced by `true`
and by `false`."""

from __future__ import annotations

from collections.abc import Iterator

from pglast import ast
from pglast.enums import A_Expr_Kind, BoolExprType

from evidence_lib.mutation.families import ExprContext
from evidence_lib.mutation.sqltree import NodeChange, Path, walk

RELATIONAL: dict[str, tuple[str, ...]] = {
    "<": ("<=", ">="),
    "<=": ("<", ">"),
    ">": (">=", "<="),
    ">=": (">", "<"),
    "=": ("<>",),
    "<>": ("=",),
}
ARITHMETIC: dict[str, tuple[str, ...]] = {"+": ("-",), "-": ("+",), "*": ("/",), "/": ("*",), "%": ("*",)}
# kinds of A_Expr that flip into each other, with the name the report shows
KIND_FLIPS: dict[A_Expr_Kind, tuple[A_Expr_Kind, str]] = {
    A_Expr_Kind.AEXPR_DISTINCT: (A_Expr_Kind.AEXPR_NOT_DISTINCT, "IsDistinctToIsNotDistinct"),
    A_Expr_Kind.AEXPR_NOT_DISTINCT: (A_Expr_Kind.AEXPR_DISTINCT, "IsNotDistinctToIsDistinct"),
    A_Expr_Kind.AEXPR_BETWEEN: (A_Expr_Kind.AEXPR_NOT_BETWEEN, "BetweenToNotBetween"),
    A_Expr_Kind.AEXPR_NOT_BETWEEN: (A_Expr_Kind.AEXPR_BETWEEN, "NotBetweenToBetween"),
}
# `is [not] distinct from` to its null-unsafe cousin
DISTINCT_TO_OPERATOR = {A_Expr_Kind.AEXPR_DISTINCT: "<>", A_Expr_Kind.AEXPR_NOT_DISTINCT: "="}


def _op_name(node: ast.A_Expr) -> str:
    return str(node.name[-1].sval) if node.name else ""


def _name_prefix(node: ast.A_Expr) -> tuple[ast.Node, ...]:
    return tuple(node.name[:-1]) if node.name else ()


def _with_operator(op: str) -> ast.A_Expr:
    return ast.A_Expr(kind=A_Expr_Kind.AEXPR_OP, name=(ast.String(op),))


def _replace_op(op: str):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node:
        assert isinstance(node, ast.A_Expr)
        node.name = (*_name_prefix(node), ast.String(op)) if node.kind == A_Expr_Kind.AEXPR_OP else (ast.String(op),)
        if node.kind != A_Expr_Kind.AEXPR_IN:
            node.kind = A_Expr_Kind.AEXPR_OP
        return node

    return build


def _flip_kind(kind: A_Expr_Kind):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node:
        assert isinstance(node, ast.A_Expr)
        node.kind = kind
        if kind in (A_Expr_Kind.AEXPR_BETWEEN, A_Expr_Kind.AEXPR_NOT_BETWEEN):
            node.name = (ast.String("BETWEEN" if kind == A_Expr_Kind.AEXPR_BETWEEN else "NOT BETWEEN"),)
        return node

    return build


def relational(ctx: ExprContext) -> Iterator[NodeChange]:
    """Each comparison by its neighbours; distinct/between/in flipped."""
    for path, node in walk(ctx.root):
        if not isinstance(node, ast.A_Expr):
            continue
        op = _op_name(node)
        loc = node.location
        if node.kind == A_Expr_Kind.AEXPR_OP and op in RELATIONAL:
            for other in RELATIONAL[op]:
                yield NodeChange(f"{op}To{other}", path, _replace_op(other), loc)
        elif node.kind in KIND_FLIPS:
            kind, name = KIND_FLIPS[node.kind]
            yield NodeChange(name, path, _flip_kind(kind), loc)
            if node.kind in DISTINCT_TO_OPERATOR:
                other = DISTINCT_TO_OPERATOR[node.kind]
                yield NodeChange(f"{'IsDistinct' if other == '<>' else 'IsNotDistinct'}To{other}", path,
                                 _replace_op(other), loc)  # fmt: skip
        elif node.kind == A_Expr_Kind.AEXPR_IN:
            negated = "<>" if op == "=" else "="
            yield NodeChange("InToNotIn" if op == "=" else "NotInToIn", path, _replace_op(negated), loc)


def arithmetic(ctx: ExprContext) -> Iterator[NodeChange]:
    for path, node in walk(ctx.root):
        if isinstance(node, ast.A_Expr) and node.kind == A_Expr_Kind.AEXPR_OP and node.lexpr is not None:
            op = _op_name(node)
            for other in ARITHMETIC.get(op, ()):
                yield NodeChange(f"{op}To{other}", path, _replace_op(other), node.location)


def _swap_bool(node: ast.Node) -> ast.Node:
    assert isinstance(node, ast.BoolExpr)
    node.boolop = BoolExprType.OR_EXPR if node.boolop == BoolExprType.AND_EXPR else BoolExprType.AND_EXPR
    return node


def _unwrap_not(node: ast.Node) -> ast.Node:
    assert isinstance(node, ast.BoolExpr) and node.args
    inner: ast.Node = node.args[0]
    return inner


def logical(ctx: ExprContext) -> Iterator[NodeChange]:
    """`and` to `or` and back; `not x` to `x`."""
    for path, node in walk(ctx.root):
        if not isinstance(node, ast.BoolExpr):
            continue
        if node.boolop == BoolExprType.AND_EXPR:
            yield NodeChange("AndToOr", path, _swap_bool, node.location)
        elif node.boolop == BoolExprType.OR_EXPR:
            yield NodeChange("OrToAnd", path, _swap_bool, node.location)
        elif node.boolop == BoolExprType.NOT_EXPR:
            yield NodeChange("NotRemoved", path, _unwrap_not, node.location)


def _bool_const(value: bool) -> ast.Node:
    return ast.A_Const(isnull=False, val=ast.Boolean(boolval=value))


def _negate(node: ast.Node) -> ast.Node:
    return ast.BoolExpr(boolop=BoolExprType.NOT_EXPR, args=(node,))


def _conditions(ctx: ExprContext) -> Iterator[tuple[Path, ast.Node]]:
    """The conditions of an expression: a PL/pgSQL IF/ELSIF/EXIT WHEN/WHILE condition as a
    whole, and every CASE WHEN condition inside SQL."""
    if ctx.expr.role == "cond" and isinstance(ctx.root, ast.SelectStmt) and ctx.root.targetList:
        yield (("targetList", 0), ("val", None)), ctx.root.targetList[0].val
    for path, node in walk(ctx.root):
        if isinstance(node, ast.CaseWhen) and node.expr is not None:
            yield (*path, ("expr", None)), node.expr


def conditions(ctx: ExprContext) -> Iterator[NodeChange]:
    """Each condition negated, and replaced by true and by false (PIT's REMOVE_CONDITIONALS)."""
    for path, node in _conditions(ctx):
        loc = getattr(node, "location", None)
        yield NodeChange("ConditionNegated", path, _negate, loc)
        yield NodeChange("ConditionToTrue", path, lambda _n: _bool_const(True), loc)
        yield NodeChange("ConditionToFalse", path, lambda _n: _bool_const(False), loc)
