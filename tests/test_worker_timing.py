"""The latency instruments the workers and the benchmarks share (`workers/timing.py`): the
percentiles every report prints, and what each call records, on a clock the test advances."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from evidence_lib.workers import timing
from evidence_lib.workers.timing import CallTimes, maybe_timed, percentile


class Clock:
    """`time.perf_counter` for the timing module: it moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(timing.time, "perf_counter", fake)  # type: ignore[attr-defined]
    yield fake


def test_percentiles_interpolate_between_the_ordered_values() -> None:
    values = [4.0, 1.0, 3.0, 2.0, 5.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 3.0
    assert percentile(values, 100) == 5.0
    assert percentile(values, 25) == 2.0
    assert percentile(values, 10) == pytest.approx(1.4)  # between the first two, not further
    assert percentile(values, 90) == pytest.approx(4.6)
    assert percentile([1.0, 2.0], 50) == 1.5
    assert percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))
    assert values == [4.0, 1.0, 3.0, 2.0, 5.0]  # the caller's list is left as it was


def test_each_call_records_its_own_time_even_when_it_raises(clock: Clock) -> None:
    times = CallTimes()
    with times.time("claim"):
        clock.now += 0.25
    with pytest.raises(ValueError), times.time("claim"):
        clock.now += 0.5
        raise ValueError("the call failed")

    def settle() -> str:
        clock.now += 0.125
        return "settled"

    assert times.call("settle", settle) == "settled"
    assert dict(times.samples) == {"claim": [0.25, 0.5], "settle": [0.125]}


def test_a_batch_records_one_share_per_call_in_it(clock: Clock) -> None:
    times = CallTimes()
    with times.batch("read", 4):
        clock.now += 2.0
    with times.batch("read", 0):  # an empty batch records nothing and divides by nothing
        clock.now += 1.0
    with times.batch("read", 1):
        clock.now += 0.25
    assert times.samples["read"] == [0.5, 0.5, 0.5, 0.5, 0.25]


def test_maybe_timed_records_only_when_measuring_is_on(clock: Clock) -> None:
    times = CallTimes()
    with maybe_timed(times, "poll"):
        clock.now += 0.75
    with maybe_timed(None, "poll"):
        clock.now += 9.0
    assert dict(times.samples) == {"poll": [0.75]}


def test_the_summary_gives_milliseconds_per_call_and_leaves_out_empty_calls(clock: Clock) -> None:
    times = CallTimes()
    for ms in (1, 2, 3, 4, 10):
        with times.time("settle"):
            clock.now += ms / 1000
    times.samples["never"] = []
    summary = times.summary_ms()
    assert list(summary) == ["settle"]
    row = summary["settle"]
    assert row["calls"] == 5.0
    assert row["p50_ms"] == pytest.approx(3.0)
    assert row["p95_ms"] == pytest.approx(8.8)
    assert row["p99_ms"] == pytest.approx(9.76)
    assert row["mean_ms"] == pytest.approx(4.0)
