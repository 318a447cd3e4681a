"""The four races of the v2 protocol, both orders, both queue modes, through the barrier harness."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from evidence_lib.harness import Race, run_race
from evidence_lib.pg import db
from evidence_lib.pg.db import Server
from evidence_lib.scenarios import race_specs as races


def database_factory(server: Server, template: str) -> Callable[[], AbstractContextManager[str]]:
    @contextmanager
    def database() -> Iterator[str]:
        with db.scratch_database(server, template=template, prefix="race") as url:
            yield url

    return database


@pytest.mark.parametrize("mode", ["flow", "step"])
@pytest.mark.parametrize("make", races.ALL, ids=lambda f: f.__name__)
def test_race(server: Server, template_db: str, make: Callable[[str], Race], mode: str) -> None:
    race = make(mode)
    result = run_race(race, database_factory(server, template_db))
    transcript = result.transcript()
    assert result.passed, transcript
    for run in result.runs:
        waited = [s for s in run.steps if s.waited]
        assert waited, f"no wait was proven in {run.permutation}:\n{transcript}"
        assert all(s.wait_proofs for s in waited)
        assert any(row["locktype"] == "advisory" and row["classid"] == 7001 for row in run.lock_rows)
