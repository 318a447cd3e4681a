"""How scenarios share a run (bundle/schedule): performance alone and last, the mutation sample
after the others, the crashing ones by themselves on a shared server, --jobs 0 refused."""

from __future__ import annotations

import threading

import pytest

from evidence_lib.bundle import schedule
from evidence_lib.bundle.cli import main

NAMES = ["ab_proof", "response_loss", "races", "performance", "negative_controls", "mutation"]


def test_performance_runs_alone_after_everything_and_mutation_after_the_others() -> None:
    assert schedule.phases(NAMES, 2) == [
        ["races", "negative_controls", "ab_proof", "response_loss"], ["mutation"], ["performance"]
    ]
    assert schedule.phases(NAMES, 2, shared_server=True) == [
        ["races", "ab_proof"], ["response_loss"], ["negative_controls"], ["mutation"], ["performance"]
    ]
    assert schedule.phases(NAMES, 1) == [[n] for n in NAMES]


def test_at_most_jobs_run_at_once_and_the_critical_path_ends_each_phase() -> None:
    running, peak, lock = 0, 0, threading.Lock()
    gate = threading.Barrier(2, timeout=10)  # two of them must be running together

    def run_one(name: str) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        if name in ("a", "b"):
            gate.wait()
        with lock:
            running -= 1

    slots = schedule.run_phases([["a", "b", "c"], ["d"]], 2, run_one)
    assert peak == 2 and sorted(s.name for s in slots) == ["a", "b", "c", "d"]
    path = schedule.critical_path(slots)
    assert [s.phase for s in path] == [1, 2] and path[1].name == "d"
    assert path[0].finished == max(s.finished for s in slots if s.phase == 1)


def test_jobs_below_one_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evidence", "--jobs", "0", "--scenarios", "ab_proof"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--jobs must be at least 1" in err
