"""The mutation sweep: the model oracle kills in one rolled-back transaction and changes nothing,
shards merge into the unsharded report, verdicts are reused, the report validates against the
shared schema, and bad input gets one line and exit code 2."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from evidence_lib.bundle.cli import main
from evidence_lib.harness.snapshots import diff, snapshot
from evidence_lib.mutation import report, select
from evidence_lib.mutation.oracles import ModelOracle
from evidence_lib.mutation.registry import generated
from evidence_lib.mutation.sweep import Settings, run
from evidence_lib.pg.db import Server, connect

SMALL = ("_is_valid_slug", "_task_message")  # 9 mutants the model judges in seconds


def _mutant(obj: str, operator: str, text: str = ""):  # type: ignore[no-untyped-def]
    return next(m for m in generated().mutants if m.obj == f"function engine.{obj}" and m.operator == operator
                and text in m.original)  # fmt: skip


def test_the_model_oracle_kills_inside_a_transaction_that_leaves_nothing_behind(server: Server,
                                                                                 template_db: str) -> None:  # fmt: skip
    oracle = ModelOracle(server, template_db, examples=1)
    try:
        assert oracle.calibrate().passed, "the candidate agrees with the model"
        with connect(oracle.url) as conn:
            before = snapshot(conn)
            definition = conn.execute("select pg_get_functiondef('engine.v2_settle'::regproc)").fetchone()
        verdict = oracle.judge(_mutant("v2_settle", "UpdateDeleted", "set state = 'settled'"))
        assert verdict.status == "Killed" and verdict.by.startswith("model"), verdict
        with connect(oracle.url) as conn:
            assert diff(before, snapshot(conn)) == {}
            assert conn.execute("select pg_get_functiondef('engine.v2_settle'::regproc)").fetchone() == definition
    finally:
        oracle.close()


def _sweep(server: Server, template_db: str, tmp: Path, **kw):  # type: ignore[no-untyped-def]
    settings = Settings(objects=SMALL, examples=1, history=tmp / "history.json", parts_oracle=False, **kw)
    return run(server, template_db, "testrev", settings)


def test_four_shards_merged_equal_the_unsharded_run(server: Server, template_db: str, tmp_path: Path) -> None:
    whole = report.to_report(_sweep(server, template_db, tmp_path / "w"))
    shards = [report.to_report(_sweep(server, template_db, tmp_path / f"s{i}", shard=select.Shard(i, 4)))
              for i in range(1, 5)]  # fmt: skip
    assert sum(1 for s in shards if report.statuses(s)) >= 2, "the ids spread over the shards"
    merged = report.merge(shards)
    differ = {i for i, status in report.statuses(merged).items() if report.statuses(whole).get(i) != status}
    details = {m["id"]: (m["status"], m.get("statusReason", "")[:300]) for r in (whole, merged)
               for f in r["files"].values() for m in f["mutants"] if m["id"] in differ}  # fmt: skip
    assert report.statuses(merged) == report.statuses(whole), details
    assert len(report.statuses(whole)) == len([m for m in generated().mutants if m.functions
                                               and m.functions[0] in SMALL and m.kind == "sql"])  # fmt: skip


def test_a_second_run_reuses_every_verdict(server: Server, template_db: str, tmp_path: Path) -> None:
    first = _sweep(server, template_db, tmp_path)
    again = _sweep(server, template_db, tmp_path)
    assert first.reused == 0 and again.reused == len(again.outcomes) > 0
    assert [(o.mutant.id, o.verdict.status) for o in first.outcomes] == [
        (o.mutant.id, o.verdict.status) for o in again.outcomes
    ]


def test_the_report_validates_against_the_shared_schema(server: Server, template_db: str, tmp_path: Path) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    from evidence_lib import npmfetch

    try:
        package = npmfetch.fetch("mutation-testing-report-schema")
    except npmfetch.NpmUnavailable as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"the schema cannot be fetched here: {exc}")
    schema = json.loads((package.folder / "dist" / "src" / "mutation-testing-report-schema.json").read_text())
    data = report.to_report(_sweep(server, template_db, tmp_path))
    jsonschema.validate(data, schema)
    statuses = set(report.statuses(data).values())
    assert statuses <= {"Killed", "Survived", "NoCoverage", "CompileError", "RuntimeError", "Timeout", "Ignored",
                        "Pending"} and "Killed" in statuses  # fmt: skip


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["mutation", "--objects", "no_such_function"], "unknown object"),
        (["mutation", "--operators", "NoSuchOperator"], "unknown operator"),
        (["mutation", "--shard", "5/4"], "--shard"),
        (["mutation", "--shard", "two"], "--shard"),
        (["mutation", "--since", "no-such-revision"], "no such revision"),
        (["mutation", "--jobs", "0"], "--jobs"),
        (["mutation", "--part-jobs", "-1"], "--part-jobs"),
    ],
)
def test_bad_input_gets_one_line_and_exit_code_2(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_merge_refuses_shards_of_different_revisions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, rev in (("a", "1111"), ("b", "2222")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "mutation.json").write_text(json.dumps(
            {"schemaVersion": "2", "thresholds": {"high": 95, "low": 90}, "files": {}, "config": {"revision": rev}}))
    assert main(["merge", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 2
    assert "different revisions" in capsys.readouterr().err
    assert main(["merge", str(tmp_path / "nothing"), "--out", str(tmp_path / "m")]) == 2
