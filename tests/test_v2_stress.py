"""Stress: 4 worker sessions and 2 reconciler sessions over 200 runs, in both queue modes."""

from __future__ import annotations

import pytest

from evidence_lib.pg import db
from evidence_lib.pg.db import Server
from evidence_lib.scenarios.stress import run_stress


@pytest.mark.parametrize("mode", ["flow", "step"])
def test_stress(server: Server, template_db: str, mode: str) -> None:
    with db.scratch_database(server, template=template_db, prefix="stress") as url:
        result = run_stress(url, mode, runs=200, workers=4, reconcilers=2)  # type: ignore[arg-type]
    assert result.passed, (result.gates, result.facts, result.errors[:5])
    assert result.deadlocks_after == result.deadlocks_before
