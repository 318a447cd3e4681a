"""The generator: every applicable mutant of every engine object in `sql/` (and of the worker
code, `mutation.pysource`), with stable ids, after dropping duplicates and mutants whose
normalized parse tree equals the original's.

Families are data here: each name maps to the functions that yield its changes, so a run can ask
for some families only (`--operators`), as PIT's mutator groups allow.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pglast import ast, parse_plpgsql, parse_sql
from pglast.parser import scan

from evidence_lib.mutation.envelope import same_frozen_value
from evidence_lib.mutation.families import (
    ExprContext,
    ObjectPatch,
    TextChange,
    clauses,
    constants,
    errors,
    identifiers,
    locking,
    nulls,
    operators,
    privileges,
    schema,
    statements,
)
from evidence_lib.mutation.mutant import Mutant, Span, stable_id
from evidence_lib.mutation.plpgsql import Body, Expr, Variable, read
from evidence_lib.mutation.sources import Engine, Function, SourceNotUnderstood, engine
from evidence_lib.mutation.sqltree import NodeChange, Path, changed, deparse, parse, render

ExprFamily = Callable[[ExprContext], Iterator[NodeChange]]
BodyFamily = Callable[[Body], Iterator[TextChange]]
ObjectFamily = Callable[[Engine], Iterator[ObjectPatch]]

EXPRESSION_FAMILIES: dict[str, tuple[ExprFamily, ...]] = {
    "operator": (operators.relational, operators.arithmetic, operators.logical, operators.conditions),
    "null": (nulls.expressions,),
    "clause": (clauses.conjuncts, clauses.order_and_limit),
    "identifier": (identifiers.identifiers, identifiers.targets),
    "statement": (statements.set_assignments,),
    "constant": (constants.constants,),
    "locking": (locking.locking,),
}
BODY_FAMILIES: dict[str, tuple[BodyFamily, ...]] = {
    "identifier": (identifiers.into_targets,),
    "null": (nulls.into_strict,),
    "statement": (statements.deletions, statements.early_returns),
    "error": (errors.sqlstates,),
}
OBJECT_FAMILIES: dict[str, tuple[ObjectFamily, ...]] = {
    "schema": (schema.dropped,),
    "privilege": (privileges.grants,),
}
SQL_FAMILIES = tuple(dict.fromkeys([*EXPRESSION_FAMILIES, *BODY_FAMILIES, "higher-order", *OBJECT_FAMILIES]))
# roles of expressions no family mutates: a RAISE's message parameters and hints only shape text
NOT_MUTATED_ROLES = ("param", "option")
HOOK = "engine._hook("  # test instrumentation: inert unless armed, never mutated
# columns of text for a human, like a RAISE's message: the contract fixes that there is one, not its
# wording (docs/contract.md), so the arguments of the format() that words it are not mutated
MESSAGE_COLUMNS = ("attention_reason",)


@dataclass
class Generated:
    """What a generation produced: the mutants to run, and what was dropped before running."""

    mutants: list[Mutant] = field(default_factory=list)
    equivalent: list[Mutant] = field(default_factory=list)  # same normalized tree as the original
    duplicates: list[Mutant] = field(default_factory=list)  # same normalized tree as an earlier mutant
    not_compiling: list[Mutant] = field(default_factory=list)  # the parser refuses the mutated text
    frozen_equal: list[Mutant] = field(default_factory=list)  # two fields of the frozen envelope, same value

    def extend(self, other: Generated) -> None:
        self.mutants += other.mutants
        self.equivalent += other.equivalent
        self.duplicates += other.duplicates
        self.not_compiling += other.not_compiling
        self.frozen_equal += other.frozen_equal

    def dropped(self) -> dict[str, int]:
        """What was dropped before running, by reason (the report's `config.dropped`)."""
        return {"equivalent_by_parse_tree": len(self.equivalent), "duplicates": len(self.duplicates),
                "not_parsing": len(self.not_compiling), "equivalent_by_frozen_envelope": len(self.frozen_equal)}


# -- normalized forms ----------------------------------------------------------------------


def normalized_source(text: str) -> str:
    """An object's source as its tokens (comments and layout do not count), the body's too."""
    out: list[str] = []
    for token in scan(text):
        if token.name in ("SQL_COMMENT", "C_COMMENT"):
            continue
        piece = text[token.start : token.end + 1]
        if token.name == "SCONST" and piece.startswith("$"):
            tag = piece[: piece.index("$", 1) + 1]
            out.append(tag)
            out.append(normalized_source(piece[len(tag) : -len(tag)]))
            out.append(tag)
        else:
            out.append(piece.lower() if token.kind != "NO_KEYWORD" else piece)
    return " ".join(out)


@cache
def _normal_query(query: str, mode: int) -> str:
    text = f"SELECT {query}" if mode == 2 else query
    if mode == 3:
        return query.split(":=", 1)[0].strip() + " := " + _normal_query(query.split(":=", 1)[-1].strip(), 2)
    try:
        return "; ".join(deparse(s.stmt) for s in parse_sql(text))
    except Exception:
        return " ".join(query.split())


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "lineno":
                continue
            if k == "PLpgSQL_expr":
                out[k] = _normal_query(v["query"], v.get("parseMode", 0))
            else:
                out[k] = _strip(v)
        return out
    if isinstance(node, list):
        return [_strip(x) for x in node]
    return node


def normalized_tree(fn: Function, text: str) -> str:
    """The function's parse tree without positions, every query normalized by pglast's deparser:
    two texts with the same normalized tree are the same program."""
    if fn.language == "sql":
        body_start = text.index(fn.text[fn.body_start - 2 : fn.body_start], fn.body_start - 2)
        body = text[body_start + 2 : text.rindex("$$")]
        return "; ".join(deparse(s.stmt) for s in parse_sql(body))
    tree = parse_plpgsql(text.replace("engine.", "public."))
    return json.dumps(_strip(tree), sort_keys=True)


# -- mutants of one function ---------------------------------------------------------------


def _or_replace(text: str) -> str:
    """The function's file as a statement that replaces the candidate's definition."""
    for token in scan(text):
        if token.name == "CREATE":
            return text[: token.end + 1] + " or replace" + text[token.end + 1 :]
    raise SourceNotUnderstood("no CREATE in a function file")


def _path_key(path: Path) -> str:
    return "/".join(attr if index is None else f"{attr}[{index}]" for attr, index in path)


@cache
def _token_ends(text: str) -> dict[int, int]:
    """Token start -> end (exclusive) over a whole function file, its body's tokens included."""
    out: dict[int, int] = {}
    for token in scan(text):
        piece = text[token.start : token.end + 1]
        if token.name == "SCONST" and piece.startswith("$"):
            tag = piece[: piece.index("$", 1) + 1]
            inner = token.start + len(tag)
            out.update({inner + t.start: inner + t.end + 1 for t in scan(piece[len(tag) : -len(tag)])})
        out[token.start] = token.end + 1
    return out


def _token_end(text: str, offset: int) -> int:
    return _token_ends(text).get(offset, offset + 1)


def _words_a_message(root: ast.Node, path: Path) -> bool:
    """Whether `path` leads into the arguments of a format() assigned to a message column."""
    node, in_message = root, False
    for attr, index in path:
        if in_message and isinstance(node, ast.FuncCall) and attr == "args" and node.funcname:
            name = node.funcname[-1]
            if isinstance(name, ast.String) and name.sval == "format":
                return True
        value = getattr(node, attr)
        node = value if index is None else value[index]
        if isinstance(node, ast.ResTarget) and node.name in MESSAGE_COLUMNS:
            in_message = True
    return False


def _skipped(expr: Expr, text: str) -> bool:
    return expr.role in NOT_MUTATED_ROLES or HOOK in text[expr.start : expr.end]


class _FunctionMutants:
    def __init__(self, fn: Function, wanted: set[str], eng: Engine) -> None:
        self.fn, self.wanted, self.eng = fn, wanted, eng
        self.variables: dict[str, Variable] = {}
        self.source = normalized_source(fn.text)
        self.original = normalized_tree(fn, fn.text)
        self.seen: set[str] = set()
        self.out = Generated()

    def add(self, family: str, operator: str, where: str, start: int, end: int, text: str,
            focus: Span | None = None) -> None:  # fmt: skip
        fn = self.fn
        mutated = fn.text[:start] + text + fn.text[end:]
        mutant = Mutant(
            id=stable_id(self.source, f"{family}/{operator}", where), kind="sql", obj=fn.label, file=fn.file,
            family=family, operator=operator, span=Span(start, end), original=fn.text[start:end],
            replacement=text, patch=_or_replace(mutated), target=fn.signature, functions=(fn.name,), focus=focus,
        )  # fmt: skip
        try:
            tree = normalized_tree(fn, mutated)
        except Exception:
            self.out.not_compiling.append(mutant)
            return
        if tree == self.original:
            self.out.equivalent.append(mutant)
        elif family == "identifier" and same_frozen_value(fn, self.variables, operator, self.eng):
            self.out.frozen_equal.append(mutant)
        elif tree in self.seen:
            self.out.duplicates.append(mutant)
        else:
            self.seen.add(tree)
            self.out.mutants.append(mutant)

    def run(self, ctx_engine: Engine) -> Generated:
        body = read(self.fn)
        self.variables = body.variables
        text = self.fn.text
        for index, expr in enumerate(body.exprs):
            if _skipped(expr, text):
                continue
            root = parse(expr)
            ctx = ExprContext(ctx_engine, expr, root, body.variables, self.fn.name,
                              identifiers.trigger_row(ctx_engine, self.fn.name))  # fmt: skip
            for family, generators in EXPRESSION_FAMILIES.items():
                if family not in self.wanted:
                    continue
                for generate in generators:
                    for change in generate(ctx):
                        if _words_a_message(root, change.path):
                            continue
                        new_text = render(expr, changed(root, change))
                        focus = None
                        if change.location is not None:
                            at = expr.file_offset(change.location)
                            focus = Span(at, _token_end(text, at))
                        self.add(family, change.operator, f"e{index}:{_path_key(change.path)}", expr.start,
                                 expr.end, new_text, focus)  # fmt: skip
        for family, body_generators in BODY_FAMILIES.items():
            if family not in self.wanted:
                continue
            for body_generate in body_generators:
                for tc in body_generate(body):
                    if HOOK in text[tc.start : tc.end]:
                        continue
                    self.add(family, tc.operator, tc.where, tc.start, tc.end, tc.text)
        if "higher-order" in self.wanted:
            for a, b in statements.pairs(body):
                if HOOK in text[a.start : a.end] or HOOK in text[b.start : b.end]:
                    continue
                joined = a.text + text[a.end : b.start] + b.text
                self.add("higher-order", f"{a.operator}+{b.operator}", f"{a.where}+{b.where}", a.start, b.end, joined)
        return self.out


def function_mutants(fn: Function, families: Iterable[str] = SQL_FAMILIES, eng: Engine | None = None) -> Generated:
    eng = eng or engine()
    return _FunctionMutants(fn, set(families), eng).run(eng)


def object_mutants(eng: Engine, families: Iterable[str] = SQL_FAMILIES) -> Generated:
    out = Generated()
    for family, generators in OBJECT_FAMILIES.items():
        if family not in set(families):
            continue
        for generate in generators:
            for patch in generate(eng):
                where = f"{patch.obj}:{patch.replacement}"
                out.mutants.append(Mutant(
                    id=stable_id(normalized_source(patch.original), f"{family}/{patch.operator}", where),
                    kind="sql", obj=patch.obj, file=patch.file, family=family, operator=patch.operator,
                    span=Span(patch.start, patch.end), original=patch.original, replacement=patch.replacement,
                    patch=patch.patch, target=patch.obj, functions=patch.functions,
                ))  # fmt: skip
    return out


def sql_mutants(objects: Iterable[str] | None = None, families: Iterable[str] = SQL_FAMILIES) -> Generated:
    """Every SQL mutant of the engine (of `objects` only, when given: function names or object
    labels), in file order."""
    eng = engine()
    chosen = set(objects) if objects is not None else None
    out = Generated()
    for fn in eng.functions:
        if chosen is None or fn.name in chosen or fn.label in chosen:
            out.extend(function_mutants(fn, families, eng))
    objs = object_mutants(eng, families)
    for bucket in ("mutants", "equivalent", "duplicates", "not_compiling", "frozen_equal"):
        kept = [m for m in getattr(objs, bucket) if chosen is None or m.obj in chosen]
        getattr(out, bucket).extend(kept)
    return out
