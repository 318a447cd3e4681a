"""The operator families, one module each, operators as data (PIT keeps its mutator groups the
same way; Stryker one file per mutator). A family knows nothing of how a mutant is applied or
judged: it only says what to change.

Three shapes of family:
- an expression family yields `NodeChange`s for one parsed expression (`ExprContext`);
- a body family yields `TextChange`s for one function body (statements, guards, raises), each
  derived from the PL/pgSQL parse tree and the scanner's tokens;
- an object family (schema, privileges) yields whole patches for one engine object.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pglast import ast

from evidence_lib.mutation.plpgsql import Expr, Variable
from evidence_lib.mutation.sources import Engine


@dataclass(frozen=True)
class ExprContext:
    """One parsed expression (of a function body, or SQL text held in Python) and what is in
    scope: the variables and parameters, the function's name (parameters read `fn.param`) and,
    in a trigger function, the columns `new` and `old` surely have."""

    engine: Engine
    expr: Expr
    root: ast.Node
    variables: dict[str, Variable] = field(default_factory=dict)
    function: str = ""
    trigger_row: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class TextChange:
    """Replace the file text `start`..`end` by `text`. `where` is the stable position key."""

    operator: str
    start: int
    end: int
    text: str
    where: str


@dataclass(frozen=True)
class ObjectPatch:
    """A whole mutant of a schema object or a grant: the SQL that applies it."""

    operator: str
    obj: str
    file: str
    start: int
    end: int
    original: str
    replacement: str
    patch: str
    functions: tuple[str, ...] = ()
