"""The negative controls: the catalogue is consistent with the candidate, and the four gates that
could not fail now do, each shown against the mutant the old form missed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from evidence_lib.bundle.runner import gate_map
from evidence_lib.bundle.runs import NotebookRun
from evidence_lib.harness.isolation import run_spec
from evidence_lib.mutation.apply import apply_sql
from evidence_lib.mutation.catalogue import catalogue
from evidence_lib.mutation.controls import Target, patch_sql
from evidence_lib.pg import db, pgtap
from evidence_lib.pg.db import Server, connect
from evidence_lib.results.gate import DuplicateGate
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios import ab_proof, race_specs, races
from evidence_lib.scenarios.negative_controls import mutant_template
from evidence_lib.scenarios.support.parts import clones, run_part
from evidence_lib.scenarios.support.targets import run_target

MUTANTS = {m.name: m for m in catalogue()}


class Rollback(Exception):
    """Undo one control's patch."""

TARGETS = list({f"{t.scenario}/{t.part}/{t.mode}": t for m in catalogue() for t in m.targets}.values())


def test_the_catalogue_holds_at_least_20_uniquely_named_mutants() -> None:
    assert len(MUTANTS) == len(catalogue()) >= 20


@pytest.mark.parametrize("name", sorted(n for n, m in MUTANTS.items() if not m.generated))
def test_every_mutant_applies_cleanly_on_top_of_the_candidate(server: Server, template_db: str, name: str) -> None:
    assert patch_sql(MUTANTS[name]) or MUTANTS[name].seam or MUTANTS[name].mutant().patch
    with mutant_template(server, template_db, MUTANTS[name]) as template:
        assert template


def test_every_generated_control_applies_on_top_of_the_candidate(server: Server, template_db: str) -> None:
    """The generated controls (hundreds) in one clone: each patch applied and rolled back."""
    generated = [m for m in MUTANTS.values() if m.generated]
    assert len(generated) > 200
    with db.scratch_database(server, template=template_db, prefix="gen") as url, connect(url) as conn:
        for control in generated:
            mutant = control.mutant()
            assert mutant.patch, control.name  # a Python one is switched in in-process, not here
            with pytest.raises(Rollback), conn.transaction():
                apply_sql(conn, mutant)
                raise Rollback


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: f"{t.scenario}-{t.part}-{t.mode}")
def test_every_gate_a_mutant_names_exists_and_is_green_on_the_candidate(
    server: Server, template_db: str, target: Target
) -> None:
    run = run_target(server, template_db, target, deadline=60, tag="t")
    names = {g.name for g in run.gates}
    assert set(target.gates) <= names, f"not produced by {target.part}: {set(target.gates) - names}"
    assert run.red == []


def test_a_target_that_outlives_its_deadline_is_cut_off_fast(server: Server, template_db: str) -> None:
    started = time.monotonic()
    run = run_target(server, template_db, Target("reconciliation", "poison", ()), deadline=0.5, tag="d")
    assert run.deadline_hit and "finished_within_the_deadline" in run.red
    assert time.monotonic() - started < 15


@pytest.fixture
def mutant(request: pytest.FixtureRequest, server: Server, template_db: str) -> Iterator[str]:
    with mutant_template(server, template_db, MUTANTS[request.param]) as template:
        yield template


@pytest.mark.parametrize("mutant", ["settle_sends_b_before_reconciliation"], indirect=True)
def test_ab_proof_finds_an_early_b_message_in_the_flow_queue_where_the_old_gate_read_zero(
    server: Server, mutant: str
) -> None:
    result = ScenarioResult("ab", "", {})
    run_part(result, ab_proof.PARTS[0], clones(server, mutant), "flow")
    [after_settle] = [
        r for r in result.tables["rows_after_every_step"].to_dict("records") if str(r["step"]).startswith("4")
    ]
    old_b_live = after_settle.get("queue_b", 0) if "queue_b" in after_settle else 0  # the form before issue 14
    assert old_b_live == 0 and after_settle["b_live"] == 1
    assert not ab_proof.a_committed_alone({str(k): v for k, v in after_settle.items()})
    assert "a_committed_with_no_reconciler" in [g.name for g in result.gates if not g.passed]


@pytest.mark.parametrize("mutant", ["claim_without_row_locks"], indirect=True)
def test_the_contention_gate_sees_a_claim_without_row_locks_that_the_old_wait_gate_passed(
    server: Server, mutant: str
) -> None:
    runs = run_spec(race_specs.DOUBLE_CLAIM, "flow", clones(server, mutant))
    old_gate = all(r.passed for r in runs) and all(r.proofs for r in runs if r.permutation[0] != "ctl_release")
    assert old_gate  # any wait counted, the hook barrier's included
    result = ScenarioResult("races", "", {})
    races.record(result, race_specs.DOUBLE_CLAIM, "flow", runs)
    verdicts = {g.name: g.passed for g in result.gates}
    assert verdicts == {
        "double_claim": True,
        "double_claim_transcript_matches_expected": False,
        "double_claim_contention_proven": False,
    }


def test_a_gate_recorded_twice_under_one_key_is_an_error() -> None:
    result = ScenarioResult("s", "", {})
    result.gate("g", True, mode="flow")
    result.gate("g", True, mode="step")
    with pytest.raises(DuplicateGate):
        result.gate("g", False, mode="flow")


def test_a_red_gate_at_one_worker_count_stays_visible_in_the_bundle() -> None:
    run = NotebookRun("07_performance", "07_performance.ipynb", status="ok")
    run.gates = [
        {"name": "every case did work", "passed": False, "mode": "", "point": "workers=1"},
        {"name": "every case did work", "passed": True, "mode": "", "point": "workers=2"},
    ]
    old = {f"{run.scenario}/{g['mode'] or '-'}/{g['name']}": g["passed"] for g in run.gates}  # before issue 14
    assert list(old.values()) == [True]  # the red one was overwritten
    assert sorted(gate_map([run]).values()) == ["FAIL", "PASS"]
    run.gates.append(dict(run.gates[0]))
    with pytest.raises(DuplicateGate):
        gate_map([run])


def test_missing_pgtap_fails_under_ci_and_is_a_loud_skip_elsewhere(
    server: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PGTAP_SQL", str(tmp_path / "no_pgtap.sql"))
    monkeypatch.setenv("CI", "true")
    assert pgtap.run_pgtap(server).ok is False
    monkeypatch.setenv("CI", "")
    skipped = pgtap.run_pgtap(server)
    assert skipped.ok and not skipped.ran and "NOT RUN" in pgtap.report(skipped)


def test_ci_run_fails_when_the_pgtap_install_fails() -> None:
    script = (Path(__file__).parent.parent / ".ci" / "run").read_text()
    assert "|| echo" not in script and "|| true" not in script and "set -euo pipefail" in script


def test_the_catalogue_page_lists_every_mutant() -> None:
    page = (Path(__file__).parent.parent / "docs" / "negative-controls.md").read_text()
    assert [name for name in MUTANTS if f"| `{name}` |" not in page] == []
