"""The evidence over several runners (issue 34): `make evidence SHARD=i/n` runs a deterministic share
of the scenarios, `python -m evidence_lib merge` assembles the shards into one bundle whose gates
equal an unsharded run's, and refuses (one line, exit 2, nothing written) what does not make one
bundle."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from evidence_lib.bundle.cli import main
from evidence_lib.bundle.merge import BadMerge, merge
from evidence_lib.bundle.runner import run_evidence
from evidence_lib.bundle.shards import Shard, share, shares
from evidence_lib.pg.db import Server

SMALL = "ab_proof,admission,queue_identity"
PARAMS = {"queue_modes": "step"}


def test_the_shares_are_deterministic_disjoint_and_complete() -> None:
    names = ["ab_proof", "response_loss", "races", "reconciliation", "queue_identity", "admission", "security",
             "negative_controls", "model_check", "mutation", "validation"]  # fmt: skip
    for count in (1, 2, 3, 5, 12):
        split = shares(names, count)
        assert sorted(n for s in split for n in s) == sorted(names)
        assert split == shares(list(names), count)
        assert all(share(names, Shard(i + 1, count)) == split[i] for i in range(count))
    heavy = shares(names, 3)
    assert all({"model_check", "races"} - set(s) for s in heavy), "the two heaviest never share a runner"


@pytest.fixture(scope="module")
def shards(server: Server, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path]]:
    root = tmp_path_factory.mktemp("shards")
    whole = root / "whole"
    assert run_evidence(SMALL, PARAMS, database_url=server.maintenance_url, out=whole) == 0
    parts = []
    for i in (1, 2, 3):
        out = root / f"s{i}"
        assert run_evidence(SMALL, PARAMS, database_url=server.maintenance_url, out=out, shard=Shard(i, 3)) == 0
        parts.append(out)
    return whole, parts


def test_three_shards_merge_into_the_bundle_an_unsharded_run_writes(shards: tuple[Path, list[Path]],
                                                                      tmp_path: Path) -> None:  # fmt: skip
    whole, parts = shards
    ran = [json.loads((p / "manifest.json").read_text())["scenarios"] for p in parts]
    assert sorted(n for r in ran for n in r) == sorted(SMALL.split(",")) and all(len(r) == 1 for r in ran)
    target, code = merge(parts, tmp_path / "merged")
    assert code == 0
    merged = json.loads((target / "manifest.json").read_text())
    unsharded = json.loads((whole / "manifest.json").read_text())
    assert merged["gates"] == unsharded["gates"] and merged["passed"]
    assert [m["shard"] for m in merged["merged_from"]] == ["1/3", "2/3", "3/3"]
    index = (target / "index.html").read_text()
    for stem in ("01_ab_proof", "05_queue_identity", "06_admission"):
        assert stem in index and (target / "html" / f"{stem}.html").exists() and (target / f"{stem}.ipynb").exists()
    assert (target / "bundle.zip").exists() and (target / "summary.md").exists()


def _refused(args: list[str], capsys: pytest.CaptureFixture[str], out: Path, message: str) -> None:
    assert main(["merge", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert not out.exists() or not any(out.iterdir()), "nothing written"


def test_merge_refuses_a_missing_shard_a_duplicate_and_another_revision(
    shards: tuple[Path, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, parts = shards
    _refused([str(parts[0]), str(parts[2])], capsys, tmp_path / "a", "shard 2/3 is missing")
    _refused([str(parts[0]), str(parts[0]), str(parts[1])], capsys, tmp_path / "b", "given twice")
    other = tmp_path / "other"
    shutil.copytree(parts[1], other)
    manifest = json.loads((other / "manifest.json").read_text())
    manifest["revision"] = "0" * 40
    (other / "manifest.json").write_text(json.dumps(manifest))
    _refused([str(parts[0]), str(other), str(parts[2])], capsys, tmp_path / "c", "different revisions")
    manifest["revision"] = json.loads((parts[0] / "manifest.json").read_text())["revision"]
    manifest["migration_artifact"]["sha256"] = "f" * 64
    (other / "manifest.json").write_text(json.dumps(manifest))
    _refused([str(parts[0]), str(other), str(parts[2])], capsys, tmp_path / "d", "different migration artifacts")
    _refused([str(tmp_path)], capsys, tmp_path / "e", "not an evidence bundle")
    with pytest.raises(BadMerge):
        merge([])


@pytest.mark.parametrize("spec", ["0/3", "4/3", "two", "1-3"])
def test_an_unknown_shard_spec_is_refused_before_anything_runs(
    spec: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "bundle"
    assert main(["evidence", "--scenarios", "ab_proof", "--shard", spec, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--shard" in err[0] and not out.exists()


def test_shards_of_two_majors_merge_into_one_matrix_bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI matrix: each runner one major; the merge writes `pg<N>/` folders and gates x versions."""
    from evidence_lib.pg import servers
    from evidence_lib.pg.cluster import available_majors

    other = "15"
    if other not in available_majors():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must install postgresql-{other} (see .ci/run)")
        pytest.skip(f"PostgreSQL {other} is not installed: sudo apt-get install postgresql-{other}")
    bundles = []
    for major in (servers.EMBEDDED_MAJOR, other):
        monkeypatch.setenv(servers.PG_ENV, major)
        out = tmp_path / f"pg{major}"
        assert run_evidence("ab_proof", PARAMS, out=out) == 0
        bundles.append(out)
    target, code = merge(bundles, tmp_path / "matrix")
    manifest = json.loads((target / "manifest.json").read_text())
    assert code == 0 and manifest["matrix"] and manifest["passed"]
    for major in (servers.EMBEDDED_MAJOR, other):
        assert (target / f"pg{major}" / "html" / "01_ab_proof.html").exists()
        assert any(k.startswith(f"pg{major}:01_ab_proof/") for k in manifest["gates"])
    index = (target / "index.html").read_text()
    assert "What ran where" in index and f"PostgreSQL {other}" in index
