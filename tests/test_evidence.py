"""The evidence suite: clean notebooks, a papermill smoke run of every notebook with small
parameters, parameter validation, and a deliberately failing gate turning the run red."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import nbformat
import pytest

from evidence_lib.bundle.notebooks import DEFAULT_CELL_TIMEOUT, cell_timeout
from evidence_lib.bundle.params import declared_parameters
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
    import papermill

    declared = papermill.inspect_notebook(str(path))  # papermill skips a line with two "=" (one in its comment)
    assert sorted(declared) == sorted(ln.split(":", 1)[0] for ln in lines), "papermill reads every parameter"
    assert nb.metadata["kernelspec"]["name"] == "dirty-runs-evidence"
    assert len(nb.cells) < 40
    budget = nb.metadata.get("evidence", {})
    if "cell_timeout_seconds" in budget:  # a notebook that needs more than the default says why
        assert budget["cell_timeout_seconds"] > DEFAULT_CELL_TIMEOUT and budget.get("cell_timeout_why"), budget


def test_a_notebook_declares_its_own_cell_budget_and_the_caller_overrides_it() -> None:
    """The cell timeout is a liveness backstop: the negative controls loop over every control of
    the catalogue (each part bounded by its own deadline) and declare a longer one; others keep
    the default; an explicit --cell-timeout wins over both."""
    assert cell_timeout("10_negative_controls", None) == 1800
    assert cell_timeout("01_ab_proof", None) == DEFAULT_CELL_TIMEOUT == 600
    assert cell_timeout("10_negative_controls", 42.0) == 42.0


def test_every_scenario_has_its_notebook() -> None:
    assert {f"{stem}.ipynb" for stem in SCENARIOS.values()} <= {p.name for p in NOTEBOOKS}


def test_an_unknown_parameter_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match="no_such_parameter"):
        run_evidence("ab_proof", {"no_such_parameter": 1}, out=tmp_path / "b")
    assert not (tmp_path / "b").exists()  # refused before anything ran


SMALL: dict[str, Any] = {
    "queue_modes": "step",
    "repeat": 1,
    "workers": "1",
    "seconds": 1.0,
    "pool_repetitions": 1,
    "pool_budget": 0.0,
    "lone_runs": 5,
    "idle_seconds": 1.0,
    "backlog": 900,  # about 3 s of A backlog in step mode: B must settle within it, under the suite's load
    "probes": 10,
    "soak_runs": 100,
    "restart_runs": 0,
    "compare_repetitions": 1,
    "compare_seconds": 0.5,
    "compare_connections": "1",
    "growth_points": "",
    "threads": 12,
    "mutants": "settle_does_not_archive_the_message,claim_without_row_locks,public_may_settle",
    "examples": 10,
    "steps": 30,
    "mutant_examples": 2,
    "sample": 6,
    "jobs": 1,
    "oracle_examples": 1,
    "parts_oracle": False,
    "history": False,
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_smoke_run_of_each_notebook(scenario: str, server: Server, tmp_path: Path) -> None:
    """Every notebook on tiny parameters, each in a bundle of its own (one test per notebook, so
    the notebooks spread over the test workers): green, and a bundle that is everything a bundle
    must be."""
    stem = SCENARIOS[scenario]
    declared = declared_parameters(stem)
    bundle = tmp_path / "bundle"
    small = {k: v for k, v in SMALL.items() if k in declared}
    code = run_evidence(scenario, small, database_url=server.maintenance_url, out=bundle, jobs=1)
    assert code == 0
    check_bundle(bundle, [stem])
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["cell_timeout_seconds"] == {stem: cell_timeout(stem, None)}
    sidecar = json.loads((bundle / "sidecars" / f"{stem}.json").read_text())
    assert sidecar["parameters"].get("queue_modes", "step") == "step", stem
    index = (bundle / "index.html").read_text()
    if scenario == "negative_controls":
        assert "negative controls: 3 of 3 killed" in index
    if scenario == "mutation":
        mutation = json.loads((bundle / "mutation.json").read_text())
        assert mutation["config"]["mode"].startswith("sample of 6") and len(mutation["files"]) >= 1
        assert "mutation score: " in index
    if scenario == "ab_proof":
        assert json.loads((bundle / "manifest.json").read_text())["parameters"]["01_ab_proof"]["queue_modes"] == "step"


def check_bundle(bundle: Path, stems: list[str] | None = None) -> None:
    """Everything a green bundle of `stems` (default: every scenario) must be (also run by hand on
    a `make evidence` bundle)."""
    stems = list(SCENARIOS.values()) if stems is None else stems
    manifest = json.loads((bundle / "manifest.json").read_text())
    red = {k: v for k, v in manifest["gates"].items() if v != "PASS"}
    assert manifest["passed"] and not red, (red, [n["error"] for n in manifest["notebooks"]])
    for stem in stems:
        sidecar = json.loads((bundle / "sidecars" / f"{stem}.json").read_text())
        assert sidecar["passed"] and sidecar["gates"], stem
        for gate in sidecar["gates"]:
            assert not REPR.search(str(gate["detail"])), (stem, gate["name"], gate["detail"])
        for suffix in (".html", ".full.html"):
            page = (bundle / "html" / f"{stem}{suffix}").read_text()
            assert 10_000 < len(page.encode()) < 5 * 1024 * 1024, (stem, suffix)
            assert_stands_alone(page, manifest)
            assert f"<title>{stem}: PASS" in page
        assert (bundle / f"{stem}.ipynb").exists() and (bundle / "logs" / f"{stem}.log").exists()
        assert_rerunnable(bundle / f"{stem}.ipynb")
    assert manifest["migration_artifact"]["sha256"] and manifest["schema_sync"]["in_sync"]
    assert_manifest_reproduces(manifest)
    index = (bundle / "index.html").read_text()
    assert "PASS" in index and ("negative controls: " in index or "10_negative_controls" not in stems)
    assert_stands_alone(index, manifest)
    charted = any((bundle / "charts").glob("*.png"))
    assert ("data:image/png;base64," in index) == charted and 'src="charts/' not in index, "the index embeds its charts"
    assert len(index.encode()) < 5 * 1024 * 1024 and "Reproduce:" in index
    summary = (bundle / "summary.md").read_text()
    assert manifest["migration_artifact"]["sha256"] in summary and "Dirty Runs evidence: PASS" in summary
    assert all(f"| {stem} |" in summary for stem in stems) and "### Red gates" in summary
    if "07_performance" in stems:
        assert "### Performance headline" in summary and "v2 / v1" in summary
    assert (bundle / "bundle.zip").stat().st_size < 25 * 1024 * 1024
    names = zipfile.ZipFile(bundle / "bundle.zip").namelist()
    assert any(n.endswith("manifest.json") for n in names) and any(n.endswith("index.html") for n in names)
    assert list((bundle / "charts").glob("*.png")) or len(stems) < len(SCENARIOS)
    tables = list((bundle / "tables").glob("*.csv"))
    assert tables and all(t.read_text().split(",")[0].strip() == "postgresql" for t in tables), "server in every table"
    floats = [f"{t.name}: {c}" for t in tables for c in integral_float_columns(t)]
    assert not floats, f"integers written as floats in {floats}"
    pool_chatter = [p.name for p in (bundle / "logs").glob("*.log") if "INFO psycopg.pool" in p.read_text()]
    assert not pool_chatter, pool_chatter


def integral_float_columns(path: Path) -> list[str]:
    """Columns whose every value is written like `2.0` (ids and counts must read `2`)."""
    with path.open(newline="") as source:
        rows = list(csv.DictReader(source))
    columns = list(rows[0]) if rows else []
    return [c for c in columns if all(re.fullmatch(r"-?\d+\.0", r[c] or "") for r in rows)]


REPR = re.compile(r"UUID\(|datetime\.|\{'|\w+\(\w+=|\[\('")


def assert_stands_alone(page: str, manifest: dict[str, Any]) -> None:
    """A page attached alone is proof: revision, artifact sha256, date, server, stamp; nothing
    fetched from the network."""
    assert manifest["revision"] in page and manifest["migration_artifact"]["sha256"] in page
    assert manifest["started_at"] in page and "PostgreSQL " in page
    assert "NOT CANDIDATE EVIDENCE" in page or "Candidate evidence" in page
    assert "<title>Notebook</title>" not in page
    assert not re.search(r"<script[^>]+src=\"?https?://", page), "a script from the network"
    assert not re.search(r"<link[^>]+href=\"?https?://", page), "a stylesheet from the network"


def assert_rerunnable(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    injected = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert injected and 'database_url = ""' in injected[0].source and 'bundle_dir = ""' in injected[0].source
    assert "/tmp/" not in injected[0].source and "host=" not in injected[0].source


def assert_manifest_reproduces(manifest: dict[str, Any]) -> None:
    assert manifest["command_line"] and manifest["reproduce"].startswith("git checkout ")
    assert manifest["machine"]["cores"] and manifest["machine"]["cpu"] and manifest["machine"]["os"]
    settings = manifest["servers"][0]["settings"]
    assert {"fsync", "synchronous_commit", "shared_buffers", "server_version"} <= settings.keys()
    assert manifest["pgmq"]["sql"] and len(manifest["packages"]) > 30
    for stem, used in manifest["parameters"].items():
        assert {"database_url", "bundle_dir"} <= used.keys() and len(used) >= 3, (stem, "every parameter, defaults too")
    if "07_performance" in manifest["parameters"]:
        assert manifest["parameters"]["07_performance"]["anchor_version"], "a default the run did not override"
    assert manifest["dirty"] == bool(manifest["dirty_files"])


def test_an_unreachable_server_leaves_no_bundle(tmp_path: Path) -> None:
    from evidence_lib.pg.db import ServerUnavailable

    with pytest.raises(ServerUnavailable):
        run_evidence("ab_proof", {}, database_url=f"postgresql://nobody@/postgres?host={tmp_path}", out=tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_ctrl_c_leaves_a_bundle_marked_interrupted_and_no_kernel_file(tmp_path: Path) -> None:
    """SIGINT to the runner alone (not its kernels) while the races notebook runs beside another:
    exit 130, a bundle with what ran, marked interrupted; the kernels' connection files and
    sockets are gone with the runner's folder."""
    bundle, scratch = tmp_path / "b", Path(tempfile.mkdtemp(prefix="ev-", dir="/tmp"))  # short: IPC paths
    command = [sys.executable, "-m", "evidence_lib", "evidence", "--scenarios", "queue_identity,races",
               "-p", "queue_modes=step", "--jobs", "2", "--out", str(bundle)]  # fmt: skip
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ | {"TMPDIR": str(scratch)}
    )
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:  # bounded: the runner prints at least every 10 s
        seen.append(line)
        if "permutation runs" in line:  # the races notebook is running a permutation
            proc.send_signal(signal.SIGINT)
            break
    try:
        code = proc.wait(timeout=60)
    finally:
        proc.kill()
    assert code == 130, "".join(seen)
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["interrupted"] and manifest["exit_code"] == 130 and not manifest["passed"]
    statuses = {n["scenario"]: n["status"] for n in manifest["notebooks"]}
    assert statuses["03_races"] == "interrupted"  # the two ran side by side (--jobs 2)
    assert statuses["05_queue_identity"] in ("ok", "interrupted")
    assert "INTERRUPTED" in (bundle / "index.html").read_text() and (bundle / "summary.md").exists()
    leftovers = [p for p in scratch.rglob("*") if p.name.startswith(("evidence-runtime", "kernel")) or
                 p.suffix == ".json" or "-ipc-" in p.name]  # fmt: skip
    assert not leftovers, leftovers
    assert not list((NOTEBOOKS_DIR).glob("kernel-ipc-*"))
    shutil.rmtree(scratch, ignore_errors=True)


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
