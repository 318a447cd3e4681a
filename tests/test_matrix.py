"""`make matrix`: one bundle, one folder per PostgreSQL version, the version in every table and
gate key, and an index that says what ran where. Needs Debian's PostgreSQL 15 server binaries
(`.ci/run` installs them; CI refuses to skip)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evidence_lib.bundle.runner import run_evidence
from evidence_lib.pg import db
from evidence_lib.pg.cluster import available_majors

OTHER = "15"


def test_a_matrix_bundle_runs_every_version_and_says_what_ran_where(tmp_path: Path) -> None:
    if OTHER not in available_majors():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must install postgresql-{OTHER} (see .ci/run)")
        pytest.skip(f"PostgreSQL {OTHER} is not installed: sudo apt-get install postgresql-{OTHER}")
    bundle = tmp_path / "matrix"
    code = run_evidence("queue_identity", {}, out=bundle, versions=[db.EMBEDDED_MAJOR, OTHER])
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert code == 0 and manifest["passed"] and manifest["matrix"]
    assert sorted(s["major"] for s in manifest["servers"]) == sorted([db.EMBEDDED_MAJOR, OTHER])
    for major in (db.EMBEDDED_MAJOR, OTHER):
        folder = bundle / f"pg{major}"
        assert (folder / "html" / "05_queue_identity.html").exists()
        tables = list((folder / "tables").glob("*.csv"))
        assert tables and all(t.read_text().splitlines()[1].startswith(f"{major},") for t in tables)
        assert any(k.startswith(f"pg{major}:05_queue_identity/") for k in manifest["gates"])
        assert f"PostgreSQL {major}" in (folder / "html" / "05_queue_identity.html").read_text()
    index = (bundle / "index.html").read_text()
    assert "What ran where" in index and f"PostgreSQL {OTHER}" in index
    assert f"05_queue_identity @ pg{OTHER}" in (bundle / "summary.md").read_text()
    assert manifest["reproduce"].endswith("make matrix SCENARIOS=queue_identity")
