"""The engine's objects as the generator sees them, read from `sql/` with PostgreSQL's own parser
(pglast): every function (its signature, language, return type and body), every table's columns
and named constraints, every index and trigger, and every grant of the privileges file.

Offsets are character offsets into the file's text (pglast reports characters, not bytes, for
both the parser's locations and the scanner's tokens; comments hold non-ASCII characters).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from pglast import ast, parse_sql
from pglast.parser import scan
from pglast.stream import RawStream

from evidence_lib import PROJECT_ROOT, SQL_DIR
from evidence_lib.errors import EvidenceError


class SourceNotUnderstood(EvidenceError):
    """A `sql/` file holds something the generator does not know how to read."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str  # as deparsed: "uuid", "bigint[]", ...
    has_default: bool


@dataclass(frozen=True)
class Function:
    """One engine function: `body_start`/`body_end` delimit the dollar-quoted body in `text`."""

    name: str  # "v2_claim"
    file: str  # "sql/0630_function_v2_claim.sql"
    text: str
    language: str  # "plpgsql" or "sql"
    params: tuple[Param, ...]
    returns: str  # "SETOF engine.v2_grant", "trigger", "void", ...
    body_start: int
    body_end: int

    @property
    def qualified(self) -> str:
        return f"engine.{self.name}"

    @property
    def signature(self) -> str:
        return f"engine.{self.name}({', '.join(p.type for p in self.params)})"

    @property
    def body(self) -> str:
        return self.text[self.body_start : self.body_end]

    @property
    def returns_set(self) -> bool:
        return self.returns.upper().startswith("SETOF ")

    @property
    def label(self) -> str:
        return f"function {self.qualified}"


@dataclass(frozen=True)
class SchemaObject:
    """A named constraint, an index or a trigger: what dropping it takes, and where it is."""

    kind: str  # "constraint", "unique index", "trigger"
    name: str
    table: str  # "engine.task_claims"
    file: str
    start: int
    end: int
    drop: str  # the SQL that removes it
    function: str = ""  # a trigger's function (its name)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.table}.{self.name}"


@dataclass(frozen=True)
class Grant:
    """One privilege of one grant statement: `privilege` on `target` to `grantee`."""

    privilege: str  # "EXECUTE", "USAGE"
    target: str  # "FUNCTION engine.v2_claim(uuid, text, text, bigint[])", "SCHEMA pgmq"
    grantee: str
    file: str
    start: int
    end: int

    @property
    def label(self) -> str:
        return f"grant {self.privilege.lower()} on {self.target} to {self.grantee}"


@dataclass(frozen=True)
class Engine:
    """Everything the generator mutates, plus the column types the identifier family needs."""

    functions: tuple[Function, ...]
    schema: tuple[SchemaObject, ...]
    grants: tuple[Grant, ...]
    columns: dict[str, dict[str, str]] = field(default_factory=dict)  # table -> column -> type
    composites: dict[str, dict[str, str]] = field(default_factory=dict)  # type -> field -> type
    roles: tuple[str, ...] = ("engine_worker", "engine_operator")

    def function(self, name: str) -> Function:
        for fn in self.functions:
            if fn.name == name or fn.qualified == name:
                return fn
        raise KeyError(name)

    def row_type(self, name: str) -> dict[str, str]:
        """The fields of a table's row type or a composite type (`engine.x` or `x`)."""
        key = name.removeprefix("engine.")
        return self.columns.get(key) or self.composites.get(key) or {}


def deparse(node: ast.Node | None) -> str:
    if node is None:
        raise SourceNotUnderstood("nothing to print")
    return str(RawStream()(node))


def type_name(node: ast.TypeName | None) -> str:
    """A column or parameter type in one canonical spelling (`integer` -> `int4`, ...)."""
    text = deparse(node).lower()
    return CANONICAL.get(text, text)


def last_name(names: tuple[Any, ...] | None) -> str:
    """The last part of a qualified name (`engine.v2_claim` -> `v2_claim`)."""
    if not names:
        raise SourceNotUnderstood("an empty name")
    return str(names[-1].sval)


def relation(node: ast.RangeVar | None) -> str:
    if node is None:
        raise SourceNotUnderstood("a statement without its relation")
    return str(node.relname)


CANONICAL = {
    "integer": "int4", "int": "int4", "bigint": "int8", "smallint": "int2", "boolean": "bool",
    "integer[]": "int4[]", "bigint[]": "int8[]", "timestamp with time zone": "timestamptz",
    "double precision": "float8", "character varying": "varchar",
}  # fmt: skip


def _relative(path: Path) -> str:
    return str(path.relative_to(PROJECT_ROOT))


def _function(path: Path, text: str, stmt: ast.CreateFunctionStmt) -> Function:
    options: dict[str, Any] = {str(o.defname): o.arg for o in stmt.options or ()}
    language = str(options["language"].sval)
    body_token = next((t for t in scan(text) if t.name == "SCONST" and text[t.start] == "$"), None)
    if body_token is None:
        raise SourceNotUnderstood(f"{path.name}: no dollar-quoted body")
    start, end = body_token.start, body_token.end + 1
    tag_end = text.index("$", start + 1) + 1  # "$$" or "$tag$"
    tag = text[start:tag_end]
    params = tuple(
        Param(str(p.name), deparse(p.argType), p.defexpr is not None)
        for p in stmt.parameters or ()
        if p.mode is None or p.mode.value in ("i", "d", "b")
    )
    returns = deparse(stmt.returnType) if stmt.returnType is not None else "void"
    name = last_name(stmt.funcname)
    return Function(name, _relative(path), text, language, params, returns, tag_end, end - len(tag))


def _table(path: Path, text: str, raw: ast.RawStmt, out: list[SchemaObject], columns: dict[str, dict[str, str]],
           ) -> None:  # fmt: skip
    stmt = raw.stmt
    assert isinstance(stmt, ast.CreateStmt) and stmt.relation is not None
    table = f"{stmt.relation.schemaname}.{relation(stmt.relation)}"
    cols: dict[str, str] = {}
    for element in stmt.tableElts or ():
        if isinstance(element, ast.ColumnDef):
            cols[str(element.colname)] = type_name(element.typeName)
        elif isinstance(element, ast.Constraint) and element.conname:
            start = int(element.location or 0)
            end = _element_end(text, start)
            out.append(SchemaObject("constraint", str(element.conname), table, _relative(path), start, end,
                                    f"alter table {table} drop constraint {element.conname} cascade"))  # fmt: skip
    columns[relation(stmt.relation)] = cols


def _element_end(text: str, start: int) -> int:
    """The end of one table element (a constraint): the comma or parenthesis closing it."""
    depth = 0
    for token in scan(text[start:]):
        piece = text[start + token.start : start + token.end + 1]
        if piece == "(":
            depth += 1
        elif piece == ")":
            if depth == 0:
                return start + token.start
            depth -= 1
        elif piece == "," and depth == 0:
            return start + token.start
    return len(text)


def _statement_span(text: str, raw: ast.RawStmt) -> tuple[int, int]:
    start = int(raw.stmt_location or 0)
    return start, start + raw.stmt_len if raw.stmt_len else len(text)


def _grants(path: Path, text: str, raw: ast.RawStmt, out: list[Grant]) -> None:
    stmt = raw.stmt
    assert isinstance(stmt, ast.GrantStmt)
    if not stmt.is_grant or stmt.targtype is None or stmt.targtype.value != 0:  # a revoke, or ALL ... IN SCHEMA
        return
    start, end = _statement_span(text, raw)
    objtype = stmt.objtype.name.removeprefix("OBJECT_") if stmt.objtype else ""  # FUNCTION, SCHEMA, TABLE, ...
    targets = [str(o.sval) if isinstance(o, ast.String) else deparse(o) for o in stmt.objects or ()]
    for privilege in stmt.privileges or ():
        for target in targets:
            for grantee in stmt.grantees or ():
                out.append(Grant(str(privilege.priv_name).upper(), f"{objtype} {target.replace(' (', '(')}",
                                 str(grantee.rolename), _relative(path), start, end))  # fmt: skip


@cache
def engine(sql_dir: Path = SQL_DIR) -> Engine:
    """Every object of `sql/`, in file order."""
    functions: list[Function] = []
    schema: list[SchemaObject] = []
    grants: list[Grant] = []
    columns: dict[str, dict[str, str]] = {}
    composites: dict[str, dict[str, str]] = {}
    for path in sorted(sql_dir.glob("*.sql")):
        text = path.read_text()
        for raw in parse_sql(text):
            stmt = raw.stmt
            if isinstance(stmt, ast.CreateFunctionStmt):
                functions.append(_function(path, text, stmt))
            elif isinstance(stmt, ast.CreateStmt):
                _table(path, text, raw, schema, columns)
            elif isinstance(stmt, ast.CompositeTypeStmt):
                composites[relation(stmt.typevar)] = {
                    str(c.colname): type_name(c.typeName) for c in stmt.coldeflist or () if isinstance(c, ast.ColumnDef)
                }
            elif isinstance(stmt, ast.IndexStmt) and stmt.unique:
                start, end = _statement_span(text, raw)
                schema.append(SchemaObject("unique index", str(stmt.idxname), f"engine.{relation(stmt.relation)}",
                                           _relative(path), start, end,
                                           f"drop index engine.{stmt.idxname}"))  # fmt: skip
            elif isinstance(stmt, ast.CreateTrigStmt):
                start, end = _statement_span(text, raw)
                table = f"engine.{relation(stmt.relation)}"
                schema.append(SchemaObject("trigger", str(stmt.trigname), table, _relative(path), start, end,
                                           f"drop trigger {stmt.trigname} on {table}",
                                           last_name(stmt.funcname)))  # fmt: skip
            elif isinstance(stmt, ast.GrantStmt):
                _grants(path, text, raw, grants)
    return Engine(tuple(functions), tuple(schema), tuple(grants), columns, composites)
