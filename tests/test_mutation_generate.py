"""The mutant generator reads every engine object with PostgreSQL's parser and yields stable,
de-duplicated mutants of every family (no database needed)."""

from __future__ import annotations

import collections
import dataclasses

import pytest
from pglast import parse_plpgsql
from pglast.parser import fingerprint

from evidence_lib.mutation.envelope import frozen_values, same_frozen_value
from evidence_lib.mutation.generate import SQL_FAMILIES, normalized_source, sql_mutants
from evidence_lib.mutation.plpgsql import read
from evidence_lib.mutation.pysource import PY_FAMILIES, python_mutants, sql_constants
from evidence_lib.mutation.sources import engine
from evidence_lib.mutation.sqltree import parse, render


@pytest.fixture(scope="module")
def generated():  # type: ignore[no-untyped-def]
    return sql_mutants()


def test_every_engine_function_is_read_with_its_language() -> None:
    functions = engine().functions
    assert collections.Counter(f.language for f in functions) == {"plpgsql": 34, "sql": 9}


def test_every_expression_is_found_in_the_source_and_prints_back_to_the_same_tree() -> None:
    for fn in engine().functions:
        for expr in read(fn).exprs:
            text = render(expr, parse(expr))
            again = {"expression": "SELECT ", "perform": "SELECT"}.get(expr.kind, "") + text.replace(expr.into, "")
            assert fingerprint(again) == fingerprint(expr.sql), f"{fn.name}: {expr.sql[:80]}"


def test_schema_objects_and_grants_are_read() -> None:
    eng = engine()
    kinds = collections.Counter(o.kind for o in eng.schema)
    assert kinds["constraint"] > 50 and kinds["unique index"] >= 3 and kinds["trigger"] >= 5
    assert any(g.target.startswith("FUNCTION engine.v2_claim(") and g.grantee == "engine_worker" for g in eng.grants)


def test_every_family_yields_mutants(generated) -> None:  # type: ignore[no-untyped-def]
    families = collections.Counter(m.family for m in generated.mutants)
    assert set(families) == set(SQL_FAMILIES)
    assert len(generated.mutants) > 1000


def test_ids_are_unique_and_stable(generated) -> None:  # type: ignore[no-untyped-def]
    ids = [m.id for m in generated.mutants]
    assert len(ids) == len(set(ids))
    assert [m.id for m in sql_mutants(objects={"v2_claim"}).mutants] == [
        m.id for m in generated.mutants if m.obj == "function engine.v2_claim"
    ]


def test_a_comment_or_the_layout_does_not_change_an_objects_normalized_source() -> None:
    fn = engine().function("v2_settle")
    moved = fn.text.replace("  select c.run_id into v_run_id", "  -- a comment\n      select c.run_id  into v_run_id")
    assert moved != fn.text and normalized_source(moved) == normalized_source(fn.text)


def test_a_relational_mutant_is_the_function_with_one_operator_replaced(generated) -> None:  # type: ignore[no-untyped-def]
    found = [m for m in generated.mutants if m.obj == "function engine.v2_claim" and m.operator == "<>To="
             and "v_run.status" in m.original]  # fmt: skip
    assert len(found) == 1
    mutant = found[0]
    assert "v_run.status = 'started'" in mutant.replacement
    assert "create or replace function engine.v2_claim" in mutant.patch
    parse_plpgsql(mutant.patch.replace("engine.", "public."))  # it is still PL/pgSQL


def test_equivalent_mutants_are_dropped_before_running(generated) -> None:  # type: ignore[no-untyped-def]
    # `retention < interval '0'` is what the code says already: the mutant equals the original
    assert any(m.operator == "IntervalToZero" and "prune_data_older_than" in m.obj for m in generated.equivalent)
    assert not any(m.operator == "IntervalToZero" and "prune_data_older_than" in m.obj and "retention" in m.original
                   for m in generated.mutants)  # fmt: skip


def test_fields_of_the_frozen_envelope_with_one_value_are_dropped(generated) -> None:  # type: ignore[no-untyped-def]
    values = frozen_values(engine())
    assert values["max_attempts"] == values["takeovers_per_task"] == 1 and values["steps"] == 2
    assert generated.frozen_equal, "swaps of two limits that hold the same value are dropped"
    for m in generated.frozen_equal:
        a, b = m.operator.removeprefix("v_limits.").split("Tov_limits.")
        assert values[a] == values[b], m.operator
    kept = {m.operator for m in generated.mutants if m.operator.startswith("v_limits.")}
    assert "v_limits.max_attemptsTov_limits.steps" in kept  # different values: a real mutant
    assert "v_limits.max_attemptsTov_limits.takeovers_per_task" not in kept


def test_an_envelope_variable_assigned_again_is_not_frozen() -> None:
    fn = engine().function("v2_take_over")
    body = read(fn)
    op = "v_limits.max_attemptsTov_limits.takeovers_per_task"
    assert same_frozen_value(fn, body.variables, op, engine())
    text = fn.text
    begin = text.index("\nbegin", text.index("v_limits")) + len("\nbegin")
    assigned = text[:begin] + "\n  v_limits := engine._v2_envelope();" + text[begin:]
    again = dataclasses.replace(fn, text=assigned, body_end=fn.body_end + len(assigned) - len(fn.text))
    assert not same_frozen_value(again, read(again).variables, op, engine())


def test_the_wording_of_an_attention_reason_is_not_mutated(generated) -> None:  # type: ignore[no-untyped-def]
    def of(fn: str, operator: str) -> list[str]:
        return [m.original for m in generated.mutants if m.obj == f"function engine.{fn}" and m.operator == operator]

    swap = "v_limits.takeovers_per_taskTov_limits.steps"
    assert [o for o in of("v2_take_over", swap) if "attention_reason" not in o], "the guard is mutated"
    assert not [o for o in of("v2_take_over", swap) if "attention_reason" in o], "format()'s arguments are not"
    # the condition that decides whether there is a reason at all is mutated
    assert len(of("v2_reconcile", "v_limits.errors_before_attentionTov_limits.steps")) == 2


def test_the_worker_code_gets_the_python_families_and_its_sql_the_sql_families() -> None:
    targets = {c.target for c in sql_constants()}
    assert {"evidence_lib.workers.reconciler:DUE_RUNS", "evidence_lib.workers.settle_groups:OPEN"} <= targets
    generated = python_mutants()
    assert set(collections.Counter(m.family for m in generated.mutants)) == set(PY_FAMILIES)
    assert any(m.target == "evidence_lib.workers.v2:V2Worker.execute" for m in generated.mutants)
    ids = [m.id for m in generated.mutants]
    assert len(ids) == len(set(ids))
