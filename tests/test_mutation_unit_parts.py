"""The project's tests of the worker code as parts of the mutation sweep: a test's assertion that
was green on the candidate kills a Python mutant; a test stopped by something outside the engine
and the worker code, or a pytest that ran nothing, is a RuntimeError; a SQL mutant is never
judged by them (they run on the candidate's template, not a mutant's)."""

from __future__ import annotations

import psycopg

from evidence_lib.mutation import jobs, sweep
from evidence_lib.mutation.controls import Target
from evidence_lib.mutation.coverage import CoverageMap, Covered
from evidence_lib.mutation.judging import part_verdict
from evidence_lib.mutation.mutant import Mutant, Span
from evidence_lib.mutation.oracles import judge_with_parts
from evidence_lib.mutation.pysource import python_mutants
from evidence_lib.mutation.sweep import likeliest_first
from evidence_lib.pg.db import Server
from evidence_lib.scenarios.support import targets, unit_tests

PERCENTILES = "tests/test_worker_timing.py::test_percentiles_interpolate_between_the_ordered_values"
NOWHERE = Server(maintenance_url="postgresql://postgres@/postgres?host=/nonexistent-socket-dir", kind="external")


def _target(part: str) -> Target:
    return next(t for t in unit_tests.targets() if t.part == part)


def test_every_worker_test_is_a_part_except_one_that_owns_the_server() -> None:
    parts = {t.part for t in unit_tests.targets()}
    assert PERCENTILES in parts
    assert "tests/test_worker_outages.py::test_the_takeover_command_refuses_to_take_over_without_handlers" in parts
    assert not any("a_server_crash" in p for p in parts)  # it asks for `server`: it may crash it
    assert {t.label for t in unit_tests.targets()} <= {t.label for t in targets.all_targets()}


def test_a_worker_mutant_a_test_catches_is_killed_by_its_assertion(server: Server, template_db: str) -> None:
    target = _target(PERCENTILES)
    candidate = targets.run_target(server, template_db, target, 60, "ut0", coverage=True).covered()
    assert candidate.green == ["/test_percentiles_interpolate_between_the_ordered_values"] and not candidate.red
    assert candidate.lines.get("evidence_lib/workers/timing.py")
    mutants = [m for m in python_mutants().mutants if m.target.endswith(":percentile")]
    covered = [m for m in mutants if CoverageMap([candidate]).parts_for(m)]
    assert covered, "the percentile test runs the lines of percentile()"

    def judge() -> jobs.Judged:
        return jobs.Judged(covered[0].id, judge_with_parts(server, template_db, covered[0], [candidate],
                                                           targets.run_target, "ut1"))  # fmt: skip

    verdict = jobs.in_a_fork(judge, covered[0].id).verdict
    assert verdict.status == "Killed" and verdict.by == f"part pytest/{PERCENTILES}", verdict


def test_a_worker_test_stopped_outside_the_code_under_test_is_a_runtime_error(template_db: str) -> None:
    target = _target(PERCENTILES.replace("test_percentiles_interpolate_between_the_ordered_values",
                                         "test_maybe_timed_records_only_when_measuring_is_on"))  # fmt: skip
    candidate = Covered(target.label, 1.0, green=["/test_maybe_timed_records_only_when_measuring_is_on"])
    test_with_a_server = _target("tests/test_reconciler.py::test_a_refused_run_is_skipped_and_the_others_progress")
    unreachable = targets.run_target(NOWHERE, template_db, test_with_a_server, 60, "ut2")
    verdict = part_verdict(unreachable, Covered(test_with_a_server.label, 1.0, green=[f"/{test_with_a_server.part}"]),
                           60)  # fmt: skip
    assert verdict is not None and verdict.status == "RuntimeError", verdict
    assert "ServerUnavailable" in verdict.detail or "Operational" in verdict.detail, verdict
    missing = Target("pytest", "tests/test_worker_timing.py::test_that_does_not_exist", (), None)
    nothing = targets.run_target(NOWHERE, template_db, missing, 60, "ut3")
    verdict = part_verdict(nothing, candidate, 60)
    assert verdict is not None and verdict.status == "RuntimeError" and "PytestDidNotRun" in verdict.detail, verdict


def test_a_sql_mutant_is_never_judged_by_a_worker_test() -> None:
    test = Covered(f"pytest/{PERCENTILES}", 0.1, lines={"evidence_lib/workers/timing.py": [30]})
    part = Covered("ab_proof/proof [flow]", 1.0, sql={"v2_claim": 3})
    schema = Mutant("0123456789ab", "sql", "table engine.runs", "sql/020_runs.sql", "schema", "DropDefault",
                    Span(0, 1), "x", "y", "alter table engine.runs alter column status drop default")  # fmt: skip
    assert [p.label for p in CoverageMap([test, part]).parts_for(schema)] == ["ab_proof/proof [flow]"]


def test_a_python_mutant_tries_the_worker_tests_before_the_faster_scenario_parts() -> None:
    mutant = next(m for m in python_mutants().mutants if m.target.endswith(":percentile"))
    fast = Covered("ab_proof/proof [flow]", 0.5)
    test = Covered(f"pytest/{PERCENTILES}", 2.0)
    assert [p.label for p in likeliest_first(mutant, [fast, test], 20)[0]] == [test.label, fast.label]


def test_an_exception_the_test_raises_on_what_it_was_handed_is_the_test_failing() -> None:
    def handed_none() -> None:
        sorted(None)  # type: ignore[call-overload]  # as a test would, on a None the mutant returned

    try:
        handed_none()
    except TypeError as exc:
        assert unit_tests._the_test_failed(exc)  # raised in this file, a test file: the test failed
    lost = psycopg.OperationalError("the connection is lost")
    assert not unit_tests._the_test_failed(lost)  # judged as what stopped the part: never a kill


def test_the_worker_tests_run_on_the_candidate_only_when_python_mutants_are_judged() -> None:
    settings = sweep.Settings()
    assert not [t for t in sweep._targets(settings, False) if t.scenario == "pytest"]
    assert {t.label for t in unit_tests.targets()} <= {t.label for t in sweep._targets(settings, True)}
