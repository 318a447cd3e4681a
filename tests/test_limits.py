"""The v2 envelope: the contract's numbers, one typed object in Python and one typed row in SQL."""

from __future__ import annotations

from dataclasses import fields

import psycopg
import pytest

from evidence_lib.engine.limits import Limits, LimitsMismatch, read_limits
from evidence_lib.pg.db import Conn, one


def test_v2_limits_holds_the_contract_numbers(conn: Conn) -> None:
    limits = read_limits(conn)
    assert (
        limits.steps,
        limits.max_attempts,
        limits.when_exhausted,
        limits.timeout_min_seconds,
        limits.timeout_max_seconds,
        limits.start_delay_b_max_seconds,
        limits.input_max_bytes,
        limits.result_max_bytes,
        limits.message_ids_per_call,
        limits.takeovers_per_task,
        limits.lease_grace_seconds,
        limits.reconcile_actions_default,
        limits.reconcile_actions_max,
        limits.errors_before_attention,
        limits.backoff_base_seconds,
        limits.backoff_cap_seconds,
        limits.worker_settlement_attempts,
    ) == (2, 1, "fail", 1, 900, 3600, 65536, 262144, 1, 1, 2, 8, 64, 3, 1, 60, 3)


def test_the_python_fields_the_sql_type_and_the_limit_keys_are_one_set(conn: Conn) -> None:
    keys = set(one(conn, "select engine.v2_limits()"))
    attributes = {
        r[0]
        for r in conn.execute(
            "select attname from pg_attribute where attrelid = 'engine.v2_envelope'::regclass and attnum > 0"
        ).fetchall()
    }
    assert keys == attributes == {f.name for f in fields(Limits)}


def test_the_typed_row_carries_every_limit(conn: Conn) -> None:
    assert one(conn, "select to_jsonb(engine._v2_envelope()) = engine.v2_limits()") is True


def test_a_misspelt_limit_in_sql_fails_loudly_instead_of_reading_null(conn: Conn) -> None:
    conn.execute(
        "create function pg_temp.typo() returns integer language plpgsql as $$ "
        "declare v_limits engine.v2_envelope := engine._v2_envelope(); begin return v_limits.lease_grace_secs; end $$"
    )
    with pytest.raises(psycopg.errors.UndefinedColumn, match="lease_grace_secs"):
        conn.execute("select pg_temp.typo()")


def test_an_unknown_or_missing_limit_key_is_refused_in_python() -> None:
    good = {f.name: 1 for f in fields(Limits)}
    with pytest.raises(LimitsMismatch, match="lease_grace_secs"):
        Limits.from_json({**good, "lease_grace_secs": 2})
    with pytest.raises(LimitsMismatch, match="steps"):
        Limits.from_json({k: v for k, v in good.items() if k != "steps"})
