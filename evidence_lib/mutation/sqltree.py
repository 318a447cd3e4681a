"""Parse trees of embedded SQL: walk a pglast tree with paths, change one node of a copy, and
print the copy back as the text that replaces the expression in the function's source.

A path names a node from the statement's root: a tuple of (attribute, index) steps, the index
`None` for a single node and a position for an element of a list. Printing uses pglast's own
deparser (`RawStream`), so a mutant's text is PostgreSQL's grammar, never string surgery.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from pglast import ast, parse_sql
from pglast.stream import RawStream

from evidence_lib.mutation.plpgsql import Expr
from evidence_lib.mutation.sources import SourceNotUnderstood

Step = tuple[str, int | None]
Path = tuple[Step, ...]


class Removed:
    """Returned by a change to remove the node from the list that holds it."""


REMOVED = Removed()
Build = Callable[[ast.Node], "ast.Node | Removed"]


@dataclass(frozen=True)
class NodeChange:
    """One change to one node: `build` gets the copied node at `path` and returns its
    replacement (or `REMOVED`). `location` is where the report points (in the parsed text)."""

    operator: str
    path: Path
    build: Build
    location: int | None = None


def parse(expr: Expr) -> ast.Node:
    """The statement an expression's text parses to (a SELECT for a PL/pgSQL expression)."""
    try:
        statements = parse_sql(expr.sql)
    except Exception as exc:
        raise SourceNotUnderstood(f"cannot parse {expr.sql[:80]!r}: {exc}") from exc
    if len(statements) != 1 or statements[0].stmt is None:
        raise SourceNotUnderstood(f"not one statement: {expr.sql[:80]!r}")
    root: ast.Node = statements[0].stmt
    return root


def walk(node: ast.Node, path: Path = ()) -> Iterator[tuple[Path, ast.Node]]:
    """Every node below `node` (itself first), depth first, in the order of its attributes."""
    yield path, node
    for attr in slots(node):
        value = getattr(node, attr, None)
        if isinstance(value, ast.Node):
            yield from walk(value, (*path, (attr, None)))
        elif isinstance(value, tuple):
            for i, item in enumerate(value):
                if isinstance(item, ast.Node):
                    yield from walk(item, (*path, (attr, i)))


def slots(node: ast.Node) -> tuple[str, ...]:
    """The attribute names of a pglast node."""
    return tuple(getattr(node, "__slots__", ()))


def get(root: ast.Node, path: Path) -> ast.Node:
    node = root
    for attr, index in path:
        value = getattr(node, attr)
        node = value if index is None else value[index]
    return node


def changed(root: ast.Node, change: NodeChange) -> ast.Node:
    """A copy of `root` with `change` applied."""
    new_root = copy.deepcopy(root)
    if not change.path:
        result = change.build(new_root)
        if isinstance(result, Removed):
            raise SourceNotUnderstood("the root cannot be removed")
        return result
    parent = get(new_root, change.path[:-1])
    attr, index = change.path[-1]
    old = getattr(parent, attr)
    result = change.build(old if index is None else old[index])
    if index is None:
        setattr(parent, attr, None if isinstance(result, Removed) else result)
    else:
        items = list(old)
        if isinstance(result, Removed):
            del items[index]
        else:
            items[index] = result
        setattr(parent, attr, tuple(items) if items else None)
    return new_root


def deparse(node: ast.Node | None) -> str:
    if node is None:
        raise SourceNotUnderstood("nothing to print")
    return str(RawStream()(node))


def render(expr: Expr, root: ast.Node) -> str:
    """The text that replaces `expr` in the source, for the (changed) statement `root`."""
    if expr.kind == "expression":
        assert isinstance(root, ast.SelectStmt) and root.targetList
        return deparse(root.targetList[0].val)
    text = deparse(root)
    if expr.kind == "perform":
        return text.removeprefix("SELECT")
    return f"{text} {expr.into}" if expr.into else text


def fingerprint_of(expr: Expr, root: ast.Node) -> str:
    """The normalized form of a (changed) statement: its deparsed text."""
    return deparse(root)
