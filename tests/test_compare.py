"""`compare OLD NEW` on two small bundles written here: gates flipped, appeared and vanished,
a performance change flagged only beyond the spread of the repetitions, refusals of non-bundles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidence_lib.bundle.cli import main
from evidence_lib.bundle.compare import compare_bundles, to_markdown
from evidence_lib.bundle.writer import NotABundle

PERF = "connections,system,unit,median_per_s,min_per_s,max_per_s\n"


def bundle(root: Path, name: str, gates: dict[str, str], perf: list[str], revision: str) -> Path:
    folder = root / name
    (folder / "tables").mkdir(parents=True)
    manifest = {
        "revision": revision * 40,
        "migration_artifact": {"path": "migrations/0014_x.sql", "sha256": revision * 64},
        "gates": gates,
        "passed": all(v == "PASS" for v in gates.values()),
        "notebooks": [{"scenario": "07_performance", "seconds": 100.0}],
        "servers": [{"major": "18", "settings": {"server_version": "18.6"}}],
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "tables" / "07_performance__comparison.csv").write_text(PERF + "\n".join(perf) + "\n")
    return folder


def test_gates_and_performance_beyond_the_spread(tmp_path: Path) -> None:
    old = bundle(tmp_path, "old", {"a/-/x": "PASS", "a/-/y": "PASS", "a/-/gone": "PASS"},
                 ["1,v2,run,100,95,105", "1,v1,run,200,190,210"], "a")  # fmt: skip
    new = bundle(tmp_path, "new", {"a/-/x": "FAIL", "a/-/y": "PASS", "a/-/new": "PASS"},
                 ["1,v2,run,104,99,110", "1,v1,run,150,140,160"], "b")  # fmt: skip
    c = compare_bundles(old, new)
    assert c.flipped == [("a/-/x", "PASS", "FAIL")] and c.newly_red == ["a/-/x"]
    assert c.appeared == [("a/-/new", "PASS")] and c.vanished == [("a/-/gone", "PASS")]
    judged = {p.system: p.judged for p in c.perf}
    assert judged == {"v2": "within noise", "v1": "slower"}, "only a change beyond both ranges is flagged"
    changed = {w for w, o, n in c.facts if o != n}
    assert {"revision", "artifact sha256", "verdict"} <= changed
    text = to_markdown(c)
    assert "flipped `a/-/x`: PASS → **FAIL**" in text and "**slower**" in text
    assert "the machine changed" not in text  # raw PGMQ did not move


def test_a_slower_machine_is_named_when_raw_pgmq_itself_moved(tmp_path: Path) -> None:
    old = bundle(tmp_path, "old", {}, ["1,raw,message,1000,990,1010", "1,v2,run,100,95,105"], "a")
    new = bundle(tmp_path, "new", {}, ["1,raw,message,800,790,810", "1,v2,run,80,76,84"], "a")
    text = to_markdown(compare_bundles(old, new))
    assert "Raw PGMQ itself is 20% slower" in text and "judge the engine by the ratios" in text


def test_the_command_writes_html_and_markdown_and_fails_on_a_newly_red_gate(tmp_path: Path) -> None:
    old = bundle(tmp_path, "old", {"a/-/x": "PASS"}, ["1,v2,run,100,95,105"], "a")
    new = bundle(tmp_path, "new", {"a/-/x": "PASS"}, ["1,v2,run,130,120,140"], "a")
    assert main(["compare", str(old), str(new), "--out", str(tmp_path / "c")]) == 0
    page = (tmp_path / "c" / "compare.html").read_text()
    assert "<title>Evidence compared" in page and "faster" in page
    assert (tmp_path / "c" / "compare.md").read_text().startswith("## Evidence compared")
    red = bundle(tmp_path, "red", {"a/-/x": "FAIL"}, [], "a")
    assert main(["compare", str(old), str(red), "--out", str(tmp_path / "d")]) == 1


def test_a_path_that_is_not_a_bundle_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = bundle(tmp_path, "good", {}, [], "a")
    with pytest.raises(NotABundle, match=r"no manifest\.json"):
        compare_bundles(tmp_path, good)
    with pytest.raises(NotABundle, match="not a folder"):
        compare_bundles(tmp_path / "missing", good)
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text("{}")
    assert main(["compare", str(tmp_path / "other"), str(good)]) == 1
    assert "is not a bundle manifest" in capsys.readouterr().err


def _pools(folder: Path, v2_rates: list[float], shown: str) -> None:
    rows = ["repetition,system,workers,units_per_s"]
    for rep, rate in enumerate(v2_rates):
        rows += [f"{rep},v2,8,{rate}", f"{rep},raw,8,1000"]
    (folder / "tables" / "07_performance__pools_samples.csv").write_text("\n".join(rows) + "\n")
    (folder / "tables" / "07_performance__pool_ratios.csv").write_text(
        f"workers,ratio,value,shown\n8,v2 / v1,0.7,\"{shown}\"\n")


def test_the_worker_pools_of_a_bundle_are_compared_with_their_ratios(tmp_path: Path) -> None:
    """A bundle without the plain-client comparison (the budgeted plan) still compares: the pools'
    repetitions as median [min-max], and the pools' ratios with their intervals."""
    old = bundle(tmp_path, "old", {}, [], "a")
    new = bundle(tmp_path, "new", {}, [], "a")
    _pools(old, [300, 310, 320], "0.62 [0.60, 0.65]")
    _pools(new, [400, 410, 420], "0.81 [0.78, 0.84]")
    c = compare_bundles(old, new)
    judged = {(p.connections, p.system): p for p in c.perf}
    assert judged["8 workers", "pool v2"].judged == "faster" and judged["8 workers", "pool v2"].old[0] == 310
    assert judged["8 workers", "pool raw"].judged == "within noise"
    assert ("8 workers", "pools v2 / v1", "0.62 [0.60, 0.65]", "0.81 [0.78, 0.84]") in c.ratios
    assert "pools v2 / v1" in to_markdown(c)
