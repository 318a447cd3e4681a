"""The SQLSTATE registry, the codes `sql/` raises and the table in docs/contract.md are one set."""

from __future__ import annotations

import re

from evidence_lib import PROJECT_ROOT, SQL_DIR
from evidence_lib.engine.sqlstates import SqlState

CODE = re.compile(r"errcode = '(DR\d{3})'")
DOC_ROW = re.compile(r"^\| `(DR\d{3})` \| (.+?) \|", re.MULTILINE)


def test_the_registry_holds_exactly_the_codes_sql_raises() -> None:
    raised = {m for p in SQL_DIR.glob("*.sql") for m in CODE.findall(p.read_text())}
    assert {s.value for s in SqlState} == raised


def test_the_contract_table_lists_exactly_the_registry_with_the_same_meanings() -> None:
    rows = dict(DOC_ROW.findall((PROJECT_ROOT / "docs" / "contract.md").read_text()))
    assert rows == {s.value: s.meaning for s in SqlState}
