"""The evidence suite: clean notebooks, a papermill smoke run of every notebook with small
parameters, parameter validation, and a deliberately failing gate turning the run red."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import nbformat
import pytest

from evidence_lib.bundle.runner import NOTEBOOKS_DIR, SCENARIOS, ParameterError, run_evidence
from evidence_lib.pg.db import Server

NOTEBOOKS = sorted(NOTEBOOKS_DIR.glob("*.ipynb"))
PARAM_LINE = re.compile(r"^(\w+): (str|int|float|bool) = .+  # \S.*$")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebooks_are_committed_clean_with_a_typed_parameters_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code and "parameters" in code[0].metadata.get("tags", []), "the first code cell is the parameters cell"
    for cell in nb.cells:
        assert "injected-parameters" not in cell.metadata.get("tags", []), "a stale injected-parameters cell"
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "committed with outputs"
    lines = [ln for ln in code[0].source.splitlines() if ln and not ln.startswith("#")]
    assert lines and all(PARAM_LINE.match(ln) for ln in lines), "every parameter is typed and has a help comment"
    assert nb.metadata["kernelspec"]["name"] == "dirty-runs-evidence"
    assert len(nb.cells) < 40


def test_every_scenario_has_its_notebook() -> None:
    assert {f"{stem}.ipynb" for stem in SCENARIOS.values()} <= {p.name for p in NOTEBOOKS}


def test_an_unknown_parameter_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="no_such_parameter"):
        run_evidence("ab_proof", {"no_such_parameter": 1}, out=tmp_path / "b")
    assert not (tmp_path / "b").exists()  # refused before anything ran


def test_smoke_run_of_every_notebook(server: Server, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    small = {
        "queue_modes": "step",
        "repeat": 1,
        "workers": "1",
        "seconds": 1.0,
        "backlog": 300,
        "probes": 10,
        "soak_runs": 100,
        "restart_runs": 0,
        "compare_repetitions": 1,
        "compare_seconds": 0.5,
        "compare_connections": "1",
        "growth_points": "",
        "threads": 12,
        "mutants": "settle_does_not_archive_the_message,claim_without_row_locks,public_may_settle",
    }
    code = run_evidence("", small, database_url=server.maintenance_url, out=bundle)
    manifest = json.loads((bundle / "manifest.json").read_text())
    red = {k: v for k, v in manifest["gates"].items() if v != "PASS"}
    assert code == 0 and manifest["passed"] and not red, (red, [n["error"] for n in manifest["notebooks"]])
    for stem in SCENARIOS.values():
        sidecar = json.loads((bundle / "sidecars" / f"{stem}.json").read_text())
        assert sidecar["passed"] and sidecar["gates"], stem
        assert sidecar["parameters"].get("queue_modes", "step") == "step"
        for suffix in (".html", ".full.html"):
            assert (bundle / "html" / f"{stem}{suffix}").stat().st_size > 10_000
        assert (bundle / f"{stem}.ipynb").exists() and (bundle / "logs" / f"{stem}.log").exists()
    assert manifest["migration_artifact"]["sha256"] and manifest["schema_sync"]["in_sync"]
    index = (bundle / "index.html").read_text()
    assert "PASS" in index and "negative controls: 3 of 3 killed" in index
    names = zipfile.ZipFile(bundle / "bundle.zip").namelist()
    assert any(n.endswith("manifest.json") for n in names) and any(n.endswith("index.html") for n in names)
    assert list((bundle / "charts").glob("*.png")) and list((bundle / "tables").glob("*.csv"))


def test_an_armed_hook_that_breaks_an_invariant_turns_the_run_red(server: Server, tmp_path: Path) -> None:
    bundle = tmp_path / "red"
    code = run_evidence(
        "ab_proof",
        {"queue_modes": "step", "hooks": "reconcile.action:fail"},
        database_url=server.maintenance_url,
        out=bundle,
    )
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert code == 1 and manifest["exit_code"] == 1 and not manifest["passed"]
    assert any(v == "FAIL" for v in manifest["gates"].values())
    assert not manifest["candidate"] and any("hooks" in r for r in manifest["not_candidate_reasons"])
    index = (bundle / "index.html").read_text()
    assert "FAIL" in index and "NOT CANDIDATE EVIDENCE" in index
    assert "NOT CANDIDATE EVIDENCE" in (bundle / "html" / "01_ab_proof.html").read_text()
    assert (bundle / "bundle.zip").exists()
