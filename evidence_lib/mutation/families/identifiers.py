"""Identifier replacement (Tuya et al.'s IRC/IRV families): a column, a variable or a record
field replaced by another of the same type in scope.

- a column `alias.col` of a relation of the statement: every other column of that relation with
  the same type;
- a variable or parameter (`v_x`, `fn.param`): every other variable or parameter of the same
  scalar type;
- a record field (`v_run.status`, `new.state`): every other field of the record's row type with
  the same type;
- an unqualified column of a statement that names one relation: every other column of it with the
  same type.
- a written column (`targets`): each column of an `insert` column list and each target of an
  `update ... set` replaced by every other column of the table with the same type that the
  statement does not write already;
- an `into` target (`into_targets`: `select ... into v`, `... returning ... into v`): every other
  variable of the same scalar type.
Types come from `sql/` (table columns, composite types, declarations); nothing is guessed: a
reference whose type is unknown (a `record` variable's fields) gets no mutant.
"""

from __future__ import annotations

from collections.abc import Iterator

from pglast import ast

from evidence_lib.mutation.families import ExprContext, TextChange
from evidence_lib.mutation.plpgsql import Body
from evidence_lib.mutation.sources import Engine
from evidence_lib.mutation.sqltree import NodeChange, walk


def _aliases(ctx: ExprContext) -> dict[str, dict[str, str]]:
    """alias (or table name) -> column -> type, for every engine relation the statement names."""
    out: dict[str, dict[str, str]] = {}
    for _, node in walk(ctx.root):
        if isinstance(node, ast.RangeVar) and node.schemaname == "engine":
            columns = ctx.engine.columns.get(str(node.relname), {})
            out[str(node.alias.aliasname) if node.alias else str(node.relname)] = columns
    return out


def trigger_row(engine: Engine, function: str) -> dict[str, str]:
    """The columns that `new`/`old` surely have: those of every table the trigger function serves."""
    tables = [s.table.removeprefix("engine.") for s in engine.schema if s.function == function]
    rows = [engine.columns.get(t, {}) for t in tables]
    if not rows:
        return {}
    return {c: t for c, t in rows[0].items() if all(r.get(c) == t for r in rows[1:])}


def _ref(*names: str) -> ast.ColumnRef:
    return ast.ColumnRef(fields=tuple(ast.String(sval=n) for n in names))


def _to(*names: str):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node:
        return _ref(*names)

    return build


def identifiers(ctx: ExprContext) -> Iterator[NodeChange]:
    fn = ctx.function
    variables = ctx.variables
    scalars = {n: v.type for n, v in variables.items() if "." not in v.type and v.type not in ("record", "trigger row")}
    aliases = _aliases(ctx)
    for path, node in walk(ctx.root):
        fields = tuple(node.fields or ()) if isinstance(node, ast.ColumnRef) else ()
        if not fields or not all(isinstance(f, ast.String) for f in fields):
            continue
        names = [str(f.sval) for f in fields]
        loc = getattr(node, "location", None)
        if (len(names) == 1 and names[0] in scalars) or (len(names) == 2 and names[0] == fn and names[1] in scalars):
            name = names[-1]
            for other, typ in scalars.items():
                if other != name and typ == scalars[name]:
                    target = (fn, other) if variables[other].is_param else (other,)
                    yield NodeChange(f"{name}To{other}", path, _to(*target), loc)
        elif len(names) == 2 and names[0] in variables:
            record, field = names
            kind = variables[record].type
            row = ctx.trigger_row if kind == "trigger row" else ctx.engine.row_type(kind)
            for other, typ in row.items():
                if other != field and field in row and typ == row[field]:
                    yield NodeChange(f"{record}.{field}To{record}.{other}", path, _to(record, other), loc)
        elif len(names) == 1 and len(aliases) == 1:  # an unqualified column of the only relation
            (columns,) = aliases.values()
            column = names[0]
            for other, typ in columns.items():
                if other != column and column in columns and typ == columns[column]:
                    yield NodeChange(f"{column}To{other}", path, _to(other), loc)
        elif len(names) == 2 and names[0] in aliases:
            alias, column = names
            columns = aliases[alias]
            for other, typ in columns.items():
                if other != column and column in columns and typ == columns[column]:
                    yield NodeChange(f"{alias}.{column}To{alias}.{other}", path, _to(alias, other), loc)


def _renamed(name: str):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node:
        assert isinstance(node, ast.ResTarget)
        return ast.ResTarget(name=name, indirection=node.indirection, val=node.val, location=node.location)

    return build


def targets(ctx: ExprContext) -> Iterator[NodeChange]:
    """A column an `insert` lists or an `update` sets, written into another of the same type."""
    for path, node in walk(ctx.root):
        if isinstance(node, ast.InsertStmt) and node.cols:
            listed, attr = node.cols, "cols"
        elif isinstance(node, ast.UpdateStmt) and node.targetList:
            listed, attr = node.targetList, "targetList"
        else:
            continue
        relation = node.relation
        if relation is None or relation.schemaname != "engine":
            continue
        columns = ctx.engine.columns.get(str(relation.relname), {})
        written = {str(t.name) for t in listed}
        for i, target in enumerate(listed):
            column = str(target.name)
            if target.indirection or column not in columns:
                continue
            for other, typ in columns.items():
                if other not in written and typ == columns[column]:
                    yield NodeChange(f"Write{column}To{other}", (*path, (attr, i)), _renamed(other), target.location)


def into_targets(body: Body) -> Iterator[TextChange]:
    """`select ... into v_a` (and `returning ... into v_a`) to `into v_b`, v_b of the same type."""
    scalars = {n: v.type for n, v in body.variables.items()
               if "." not in v.type and v.type not in ("record", "trigger row") and not v.is_param}  # fmt: skip
    text = body.fn.text
    for i, expr in enumerate(body.exprs):
        if not expr.into:
            continue
        after_into = False
        for token in body.tokens:
            at = body.fn.body_start + token.start
            if not expr.start <= at < expr.end:
                continue
            word = text[at : body.fn.body_start + token.end + 1]
            if word.lower() == "into":
                after_into = True
            elif after_into and word.lower() == "strict":
                continue
            elif after_into and word in scalars:
                for other, typ in scalars.items():
                    if other != word and typ == scalars[word]:
                        yield TextChange(f"Into{word}To{other}", at, at + len(word), other, f"e{i}:into:{word}")
            elif after_into and word != ",":
                after_into = False
