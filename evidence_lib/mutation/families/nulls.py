"""Null handling (Tuya et al.'s NLF family): `is null` and `is not null` swapped, `coalesce(x, d)`
to `x` and to `d`, and (a body change) `strict` removed from `into strict`."""

from __future__ import annotations

from collections.abc import Iterator

from pglast import ast
from pglast.enums import NullTestType

from evidence_lib.mutation.families import ExprContext, TextChange
from evidence_lib.mutation.plpgsql import Body
from evidence_lib.mutation.sqltree import NodeChange

SWAP = {NullTestType.IS_NULL: NullTestType.IS_NOT_NULL, NullTestType.IS_NOT_NULL: NullTestType.IS_NULL}
NAMES = {NullTestType.IS_NULL: "IsNullToIsNotNull", NullTestType.IS_NOT_NULL: "IsNotNullToIsNull"}


def _swap(node: ast.Node) -> ast.Node:
    assert isinstance(node, ast.NullTest) and node.nulltesttype is not None
    node.nulltesttype = SWAP[node.nulltesttype]
    return node


def _arg(i: int):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node:
        assert isinstance(node, ast.CoalesceExpr) and node.args
        arg: ast.Node = node.args[i]
        return arg

    return build


def expressions(ctx: ExprContext) -> Iterator[NodeChange]:
    from evidence_lib.mutation.sqltree import walk

    for path, node in walk(ctx.root):
        if isinstance(node, ast.NullTest) and node.nulltesttype is not None:
            yield NodeChange(NAMES[node.nulltesttype], path, _swap, node.location)
        elif isinstance(node, ast.CoalesceExpr) and node.args:
            for i in range(len(node.args)):
                yield NodeChange(f"CoalesceToArgument{i + 1}", path, _arg(i), node.location)


def into_strict(body: Body) -> Iterator[TextChange]:
    """`select ... into strict v` to `into v`: a missing row is no longer an error."""
    for i, expr in enumerate(body.exprs):
        if not expr.strict:
            continue
        text = body.fn.text
        for token in body.tokens:  # the STRICT keyword inside this statement
            at = body.fn.body_start + token.start
            if expr.start <= at < expr.end and text[at : at + token.end - token.start + 1].lower() == "strict":
                yield TextChange("IntoStrictToInto", at, at + len("strict"), "", f"e{i}:strict")
                break
