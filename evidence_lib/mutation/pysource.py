"""Mutants of the worker code (`evidence_lib/workers`): every function and method through the
Python families (`families.python`), and the SQL text the workers hold in module constants (the
reconciler's due-run query, the settlement round trip, the takeover's expired-claims query, the
session settings) through the SQL families, parsed with pglast like the engine's own code.

A Python mutant's patch is the mutated function's source; `apply` compiles it in the module's
namespace and swaps it in while the mutant is judged. A SQL-constant mutant's patch is the new
text of the constant.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pglast import parse_sql
from psycopg import sql as psql

from evidence_lib import PROJECT_ROOT
from evidence_lib.mutation.families import ExprContext
from evidence_lib.mutation.families.python import PYTHON_FAMILIES
from evidence_lib.mutation.generate import EXPRESSION_FAMILIES, Generated
from evidence_lib.mutation.mutant import Mutant, Span, stable_id
from evidence_lib.mutation.plpgsql import Expr, Stmt
from evidence_lib.mutation.sources import engine
from evidence_lib.mutation.sqltree import changed, deparse

WORKERS = PROJECT_ROOT / "evidence_lib" / "workers"
PY_FAMILIES = (*PYTHON_FAMILIES, "py-sql")
# SQL families that apply to SQL text in Python (statement and error families need a body)
SQL_IN_PYTHON = ("operator", "null", "clause", "identifier", "constant", "locking")
PLACEHOLDER = re.compile(r"%\(\w+\)s|%s|\{\w+\}")


@dataclass(frozen=True)
class PyFunction:
    module: str  # "evidence_lib.workers.v2"
    qualname: str  # "V2Worker.execute"
    file: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    text: str  # the file's text

    @property
    def target(self) -> str:
        return f"{self.module}:{self.qualname}"


def _offset(text: str, line: int, col: int) -> int:
    lines = text.splitlines(keepends=True)
    return sum(len(x) for x in lines[: line - 1]) + col


def _span(text: str, node: ast.AST) -> Span:
    start = _offset(text, node.lineno, node.col_offset)  # type: ignore[attr-defined]
    end = _offset(text, node.end_lineno or node.lineno, node.end_col_offset or 0)  # type: ignore[attr-defined]
    return Span(start, end)


def _skip(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Typing stubs (`@overload`) and bodies that are only a docstring or `...`."""
    if any(isinstance(d, ast.Name) and d.id == "overload" for d in node.decorator_list):
        return True
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    return not body


def functions(folder: Path = WORKERS) -> Iterator[PyFunction]:
    for path in sorted(folder.glob("*.py")):
        text = path.read_text()
        module = ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
        tree = ast.parse(text)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _skip(node):
                yield PyFunction(module, node.name, str(path.relative_to(PROJECT_ROOT)), node, text)
            elif isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and not _skip(item):
                        yield PyFunction(module, f"{node.name}.{item.name}", str(path.relative_to(PROJECT_ROOT)),
                                         item, text)  # fmt: skip


def _dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def python_mutants(families: tuple[str, ...] = PY_FAMILIES, only: set[str] | None = None) -> Generated:
    """Every mutant of the worker code (of the targets in `only`, `module:qualname`, when given)."""
    out = Generated()
    for fn in functions():
        if only is not None and fn.target not in only:
            continue
        original = _dump(fn.node)
        seen: set[str] = set()
        nodes = list(ast.walk(fn.node))
        for family, generators in PYTHON_FAMILIES.items():
            if family not in families:
                continue
            for generate in generators:
                for operator, index, mutated in generate(fn.node):
                    node = nodes[index]
                    span = _span(fn.text, node) if hasattr(node, "lineno") else _span(fn.text, fn.node)
                    source = ast.unparse(mutated)
                    mutant = Mutant(
                        id=stable_id(f"{fn.target} {original}", f"{family}/{operator}", f"n{index}"), kind="python",
                        obj=f"python {fn.target}", file=fn.file, family=family, operator=operator,
                        span=span, original=fn.text[span.start : span.end],
                        replacement=_replacement(mutated, index), patch=source, target=fn.target,
                    )  # fmt: skip
                    dump = _dump(mutated)
                    if dump == original:
                        out.equivalent.append(mutant)
                    elif dump in seen:
                        out.duplicates.append(mutant)
                    else:
                        seen.add(dump)
                        out.mutants.append(mutant)
    if "py-sql" in families:
        out.extend(sql_constant_mutants(only))
    return out


def _replacement(mutated: ast.AST, index: int) -> str:
    node = list(ast.walk(mutated))[index] if index < len(list(ast.walk(mutated))) else mutated
    try:
        return ast.unparse(node)
    except Exception:
        return "(deleted)"


# -- SQL held in Python ------------------------------------------------------------------------


@dataclass(frozen=True)
class SqlConstant:
    module: str
    name: str
    file: str
    value: str  # the SQL text (a psycopg sql.SQL's template, or a plain string)
    composed: bool  # a psycopg sql.SQL (placeholders are {name}), else a plain string
    span: Span

    @property
    def target(self) -> str:
        return f"{self.module}:{self.name}"


def sql_constants(folder: Path = WORKERS) -> Iterator[SqlConstant]:
    """Module constants holding SQL that a function of the module reads."""
    for path in sorted(folder.glob("*.py")):
        text = path.read_text()
        tree = ast.parse(text)
        module = ".".join(path.relative_to(PROJECT_ROOT).with_suffix("").parts)
        used = {n.id for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) for n in ast.walk(f)
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}  # fmt: skip
        loaded = importlib.import_module(module)
        for node in tree.body:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
                continue
            name = node.targets[0].id
            value = getattr(loaded, name, None)
            composed = isinstance(value, psql.SQL)
            text_value = value.as_string(None) if isinstance(value, psql.SQL) else value
            if name in used and isinstance(text_value, str) and _parses(text_value):
                yield SqlConstant(module, name, str(path.relative_to(PROJECT_ROOT)), text_value, composed,
                                  _span(text, node))  # fmt: skip


def _with_params(text: str) -> tuple[str, list[str]]:
    found: list[str] = []

    def sub(m: re.Match[str]) -> str:
        found.append(m.group(0))
        return f"${len(found)}"

    return PLACEHOLDER.sub(sub, text), found


def _without_params(text: str, found: list[str]) -> str:
    return re.sub(r"\$(\d+)", lambda m: found[int(m.group(1)) - 1], text)


def _parses(text: str) -> bool:
    try:
        statements = parse_sql(_with_params(text)[0])
    except Exception:
        return False
    return any(type(s.stmt).__name__ in ("SelectStmt", "UpdateStmt", "InsertStmt", "DeleteStmt") for s in statements)


def sql_constant_mutants(only: set[str] | None = None) -> Generated:
    out = Generated()
    eng = engine()
    for const in sql_constants():
        if only is not None and const.target not in only:
            continue
        text, params = _with_params(const.value)
        statements = [s.stmt for s in parse_sql(text) if s.stmt is not None]
        seen: set[str] = set()
        original = " ;".join(deparse(s) for s in statements)
        for i, root in enumerate(statements):
            expr = Expr("statement", "query", 0, 0, deparse(root), Stmt("python", 0, 0))
            ctx = ExprContext(eng, expr, root)
            for family, generators in EXPRESSION_FAMILIES.items():
                if family not in SQL_IN_PYTHON:
                    continue
                for generate in generators:
                    for change in generate(ctx):
                        mutated = [deparse(changed(root, change)) if j == i else deparse(s)
                                   for j, s in enumerate(statements)]  # fmt: skip
                        new_text = _without_params(";\n".join(mutated), params)
                        key = " ;".join(mutated)
                        mutant = Mutant(
                            id=stable_id(f"{const.target} {original}", f"py-sql/{family}:{change.operator}",
                                         f"q{i}:{change.path}"),
                            kind="python", obj=f"python {const.target}", file=const.file, family="py-sql",
                            operator=f"{family}:{change.operator}", span=const.span, original=const.value,
                            replacement=new_text, patch=new_text, target=const.target,
                        )  # fmt: skip
                        if key == original:
                            out.equivalent.append(mutant)
                        elif key in seen:
                            out.duplicates.append(mutant)
                        else:
                            seen.add(key)
                            out.mutants.append(mutant)
    return out
