"""Constants (PIT's INLINE_CONSTS and CRCR): every integer to one more, one less and 0; every
boolean to its opposite; every interval and every `make_interval(secs => ...)` to zero."""

from __future__ import annotations

from collections.abc import Iterator

from pglast import ast

from evidence_lib.mutation.families import ExprContext
from evidence_lib.mutation.sqltree import NodeChange, walk


def _int(value: int):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node:
        return ast.A_Const(isnull=False, val=ast.Integer(ival=value))

    return build


def _bool(value: bool):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node:
        return ast.A_Const(isnull=False, val=ast.Boolean(boolval=value))

    return build


def _zero_interval(node: ast.Node) -> ast.Node:
    assert isinstance(node, ast.TypeCast)
    return ast.TypeCast(arg=ast.A_Const(isnull=False, val=ast.String(sval="0")), typeName=node.typeName)


def _zero(node: ast.Node) -> ast.Node:
    return ast.A_Const(isnull=False, val=ast.Integer(ival=0))


def _is_interval(node: ast.TypeCast) -> bool:
    names = [str(n.sval) for n in node.typeName.names] if node.typeName and node.typeName.names else []
    return bool(names) and names[-1] == "interval"


def constants(ctx: ExprContext) -> Iterator[NodeChange]:
    for path, node in walk(ctx.root):
        if isinstance(node, ast.A_Const) and isinstance(node.val, ast.Integer):
            n = int(node.val.ival or 0)
            for value, name in ((n + 1, "PlusOne"), (n - 1, "MinusOne"), (0, "ToZero")):
                if value != n and not (name == "ToZero" and n in (1, -1)):  # 1 - 1 is already 0
                    yield NodeChange(f"{n}{name}", path, _int(value), None)
        elif isinstance(node, ast.A_Const) and isinstance(node.val, ast.Boolean):
            yield NodeChange(f"{node.val.boolval}ToNot", path, _bool(not node.val.boolval), None)
        elif isinstance(node, ast.TypeCast) and _is_interval(node) and isinstance(node.arg, ast.A_Const):
            yield NodeChange("IntervalToZero", path, _zero_interval, node.location)
        elif isinstance(node, ast.FuncCall) and node.funcname and str(node.funcname[-1].sval) == "make_interval":
            for i, arg in enumerate(node.args or ()):
                if isinstance(arg, ast.NamedArgExpr):
                    yield NodeChange(f"{arg.name}ToZero", (*path, ("args", i), ("arg", None)), _zero, node.location)
