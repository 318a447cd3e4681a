"""The moderation example runs end to end in both modes, and its state is read back."""

from __future__ import annotations

import subprocess
import sys

import pytest

from evidence_lib import PROJECT_ROOT
from evidence_lib.pg.db import connect
from examples.moderation.run import run_pipeline
from tests.helpers import scalar


@pytest.mark.parametrize("mode", ["flow", "step"])
def test_the_pipeline_decides_every_review(db_url: str, mode: str) -> None:
    out = run_pipeline(db_url, mode, threads=15)
    assert out.runs_completed == 15
    with connect(db_url) as conn:
        assert scalar(conn, "select count(*) from moderation.reviews where status = 'decided'") == 15
        assert scalar(conn, "select count(*) from engine.runs where status = 'completed'") == 15
        expected = ["moderation_staged__classify", "moderation_staged__fetch", "moderation_staged__verdict"]
        queues = sorted(r[0] for r in conn.execute("select queue_name from pgmq.list_queues()").fetchall())
        assert queues == (expected if mode == "step" else ["moderation"])


def test_make_example_command_runs_both_modes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "examples.moderation", "--threads", "8"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "plain flow" in done.stdout and "private step queues" in done.stdout
    assert done.stdout.count("8/8 reviews decided") == 2
