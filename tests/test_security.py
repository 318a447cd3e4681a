"""The temporary-schema shadowing attack escalates nothing through any security definer function."""

from __future__ import annotations

import pytest

from evidence_lib.pg.db import Conn
from evidence_lib.scenarios import shadowing

SAFE_PATH = "search_path=pg_catalog, pg_temp"


def test_every_security_definer_function_has_an_attack_recipe(conn: Conn) -> None:
    assert shadowing.security_definer_functions(conn) == sorted(shadowing.RECIPES)


def test_every_engine_function_searches_pg_catalog_first_and_pg_temp_last(conn: Conn) -> None:
    rows = conn.execute(
        "select p.proname, p.proconfig from pg_proc p where p.pronamespace = 'engine'::regnamespace"
    ).fetchall()
    assert rows
    unsafe = {name: config for name, config in rows if config is None or SAFE_PATH not in config}
    assert unsafe == {}


@pytest.mark.parametrize("function", sorted(shadowing.RECIPES))
def test_the_shadowing_attack_through_a_function_escalates_nothing(conn: Conn, db_url: str, function: str) -> None:
    result = shadowing.attack(conn, db_url, function, "step")
    assert result.call_ok, result.call_result
    assert not result.escalated
    assert result.fired_inside == []
    assert result.queue_columns_changed == []
