"""Mutants equivalent by the frozen envelope: `engine.v2_limits()` is an immutable function of
constants (CONTRACT section 3), and every engine function reads it once into a variable of type
`engine.v2_envelope` that nothing assigns again. Replacing one of its fields by another that holds
the same value (`v_limits.max_attempts` by `v_limits.takeovers_per_task`, both 1) changes no
value the function ever computes: the trivial compiler equivalence of the literature, with the
envelope's constants propagated. The generator drops these before anything runs and counts them.

The values are read from `sql/` with PostgreSQL's parser (pglast), never from a copy.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from pglast import parse_plpgsql, parse_sql
from pglast.visitors import Visitor

from evidence_lib.mutation.plpgsql import Variable
from evidence_lib.mutation.sources import Engine, Function

ENVELOPE_TYPE = "engine.v2_envelope"
LIMITS_FUNCTION = "v2_limits"


class _Strings(Visitor):
    def __init__(self) -> None:
        self.found: list[str] = []

    def visit_String(self, ancestors: Any, node: Any) -> None:
        self.found.append(node.sval)


@cache
def _values(text: str, body_start: int, body_end: int) -> dict[str, Any]:
    strings = _Strings()
    for statement in parse_sql(text[body_start:body_end]):
        strings(statement)
    objects = [json.loads(s) for s in strings.found if s.lstrip().startswith("{")]
    return objects[0] if len(objects) == 1 and isinstance(objects[0], dict) else {}


def frozen_values(eng: Engine) -> dict[str, Any]:
    """Every limit of the envelope with its value ({} when the engine has no such function)."""
    for fn in eng.functions:
        if fn.name == LIMITS_FUNCTION:
            return _values(fn.text, fn.body_start, fn.body_end)
    return {}


def _assigned(fn: Function) -> set[str]:
    """The variables a PL/pgSQL function assigns after their declaration (`:=` or `into`)."""
    out: set[str] = set()
    tree = parse_plpgsql(fn.text.replace("engine.", "public."))  # as mutation.plpgsql reads it
    datums = tree[0]["PLpgSQL_function"].get("datums", [])
    names = [next(iter(d.values())).get("refname", "") for d in datums]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for kind, value in node.items():
                if kind == "PLpgSQL_stmt_assign" and isinstance(value, dict):
                    out.add(names[value["varno"]])
                if kind == "target" and isinstance(value, dict):
                    inner: Any = next(iter(value.values()), {})
                    if isinstance(inner, dict) and "fields" in inner:  # `into a, b`: an unnamed row
                        out.update(names[f["varno"]] for f in inner["fields"])
                    elif isinstance(inner, dict) and "refname" in inner:
                        out.add(inner["refname"])
                    elif isinstance(inner, dict) and "dno" in inner:
                        out.add(names[inner["dno"]])
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(tree[0]["PLpgSQL_function"].get("action", {}))
    return out


@cache
def _frozen_variables(fn: Function, declared: tuple[tuple[str, str], ...]) -> frozenset[str]:
    envelopes = {name for name, type_ in declared if type_ == ENVELOPE_TYPE}
    return frozenset(envelopes - _assigned(fn)) if envelopes and fn.language == "plpgsql" else frozenset()


def same_frozen_value(fn: Function, variables: dict[str, Variable], operator: str, eng: Engine) -> bool:
    """Whether `operator` (the identifier family's `v.aTov.b`) swaps two fields of a frozen
    envelope variable that hold the same value."""
    var_a, dot, rest = operator.partition(".")
    field_a, sep, field_b = rest.partition(f"To{var_a}.")
    if not dot or not sep or field_a == field_b:
        return False
    declared = tuple(sorted((v.name, v.type) for v in variables.values() if not v.is_param))
    if var_a not in _frozen_variables(fn, declared):
        return False
    values = frozen_values(eng)
    return field_a in values and field_b in values and values[field_a] == values[field_b]
