"""Stress: 4 worker sessions and 2 reconciler sessions over 200 runs, in both queue modes; each
rule of the stress evidence is its own test over one shared run per mode."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from evidence_lib.pg import db
from evidence_lib.pg.db import Server
from evidence_lib.scenarios.stress import StressResult, run_stress

RULES = [
    "every_run_terminal",
    "every_run_completed",
    "one_task_per_step",
    "one_message_per_task",
    "one_settlement_per_task",
    "work_caught_up",
    "no_deadlock",
    "no_session_error",
]


@pytest.fixture(scope="module", params=["flow", "step"])
def stressed(request: pytest.FixtureRequest, server: Server, template_db: str) -> Iterator[StressResult]:
    with db.scratch_database(server, template=template_db, prefix="stress") as url:
        yield run_stress(url, request.param, runs=200, workers=4, reconcilers=2)


@pytest.mark.parametrize("rule", RULES)
def test_under_stress_the_rule_holds(stressed: StressResult, rule: str) -> None:
    assert stressed.gates[rule], (stressed.facts, stressed.errors[:5])


def test_every_stress_rule_is_tested() -> None:
    assert set(RULES) == set(StressResult("flow", 1, 1, 1).gates)
