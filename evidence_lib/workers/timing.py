"""Per-call latency recording and percentiles, shared by benchmarks and scenarios."""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@contextmanager
def maybe_timed(times: CallTimes | None, name: str) -> Iterator[None]:
    """Time the block into `times` when measuring is on (the benchmarks set it), else nothing."""
    if times is None:
        yield
        return
    with times.time(name):
        yield


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


@dataclass
class CallTimes:
    """Wall-clock seconds per named call."""

    samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    @contextmanager
    def time(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.samples[name].append(time.perf_counter() - start)

    @contextmanager
    def batch(self, name: str, n: int) -> Iterator[None]:
        """`n` calls made in one round trip: each is recorded with its share of the time."""
        start = time.perf_counter()
        try:
            yield
        finally:
            share = (time.perf_counter() - start) / max(n, 1)
            self.samples[name].extend([share] * n)

    def call(self, name: str, fn: Callable[[], T]) -> T:
        with self.time(name):
            return fn()

    def summary_ms(self) -> dict[str, dict[str, float]]:
        """Per call: count, p50, p95, p99 and mean in milliseconds."""
        return {
            name: {
                "calls": float(len(v)),
                "p50_ms": percentile(v, 50) * 1000,
                "p95_ms": percentile(v, 95) * 1000,
                "p99_ms": percentile(v, 99) * 1000,
                "mean_ms": statistics.fmean(v) * 1000,
            }
            for name, v in sorted(self.samples.items())
            if v
        }
