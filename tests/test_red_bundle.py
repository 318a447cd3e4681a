"""A red bundle is always written: whatever a scenario records (a counterexample longer than any
CSV field limit, a huge transcript, a binary value), the index, the manifest and every page exist
and say what went red."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from evidence_lib.bundle import notebooks, params
from evidence_lib.bundle.runner import run_evidence
from evidence_lib.pg.db import Server

HUGE = 1_000_000  # characters: well past the csv module's 131 072 default and any page budget

PLANTED = f'''
from evidence_lib.results.scenario import ScenarioResult
import pandas as pd

counterexample = "step " + "x" * {HUGE}
result = ScenarioResult("99_planted", "A planted red scenario", {{}})
result.gate("the_model_agrees", False, "counterexample: " + counterexample)
result.gate("a_green_gate", True, "fine")
result.tables["counterexamples"] = pd.DataFrame(
    [{{"seed": 1, "transcript": counterexample, "raw": b"\\x00\\xff binary"}}]
)
result.transcripts.append("t" * {HUGE})
result.notes.append("n" * {HUGE})
result.save(bundle_dir)
print(counterexample[:100])
'''


def _notebook(folder: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "dirty-runs-evidence", "display_name": "evidence", "language": "python"}
    params_cell = nbformat.v4.new_code_cell('database_url: str = ""\nbundle_dir: str = ""')
    params_cell.metadata["tags"] = ["parameters"]
    nb.cells = [params_cell, nbformat.v4.new_code_cell(PLANTED)]
    nbformat.write(nb, folder / "99_planted.ipynb")


def test_a_counterexample_larger_than_any_limit_still_gives_a_whole_red_bundle(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    _notebook(folder)
    monkeypatch.setattr(params, "NOTEBOOKS_DIR", folder)
    monkeypatch.setattr(notebooks, "NOTEBOOKS_DIR", folder)
    monkeypatch.setitem(params.SCENARIOS, "planted", "99_planted")
    bundle = tmp_path / "bundle"
    code = run_evidence("planted", database_url=server.maintenance_url, out=bundle)
    assert code == 1
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["gates"]["99_planted/-/the_model_agrees"] == "FAIL"
    assert manifest["gates"]["99_planted/-/a_green_gate"] == "PASS"
    index = (bundle / "index.html").read_text()
    assert "the_model_agrees" in index and "FAIL" in index
    assert len(index) < 200_000  # a page stays attachable: the long detail is cut there, kept in sidecars and tables
    page = (bundle / "html" / "99_planted.html").read_text()
    assert "the_model_agrees" in page or "FAIL" in page
    table = (bundle / "tables" / "99_planted__counterexamples.csv").read_text()
    assert table.startswith("postgresql,") and "x" * HUGE in table  # the whole counterexample is kept
    summary = (bundle / "summary.md").read_text()
    assert "the_model_agrees" in summary and len(summary) < 65_536  # a GitHub comment's limit
    assert (bundle / "bundle.zip").exists()
