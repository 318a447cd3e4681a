"""Ratios of interleaved measurements with a stated precision (issue 33, part 1).

Two systems measured in the same repetition (one right after the other, the order rotated per
repetition) form a pair: what slows the machine for a minute slows both. The ratio of a pair is
the measurement; over the repetitions the log-ratios give a geometric mean and a Student-t 95 %
interval (a ratio is positive and its spread multiplicative, so the interval is symmetric on the
log scale). `precise_enough` tells the caller whether to repeat again.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

# two-sided 95 % quantiles of Student's t by degrees of freedom (1..30); above 30 the normal 1.96
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042)  # fmt: skip
PRECISION = 0.10  # an interval within +-10 % of its ratio is precise enough


def t975(df: int) -> float:
    return T975[df - 1] if 1 <= df <= len(T975) else 1.96


@dataclass(frozen=True)
class RatioInterval:
    ratio: float  # the geometric mean of the paired ratios
    low: float
    high: float
    pairs: int

    @property
    def half_width(self) -> float:
        """The interval's larger distance from the ratio, as a share of the ratio (0.1 = +-10 %)."""
        return max(self.high / self.ratio - 1, 1 - self.low / self.ratio)

    @property
    def precise(self) -> bool:
        return self.pairs >= 2 and self.half_width <= PRECISION

    def shown(self) -> str:
        if self.pairs < 2:
            return f"{self.ratio:.2f} (one pair: no interval)"
        return f"{self.ratio:.2f} [{self.low:.2f}, {self.high:.2f}]"


def paired_ratio(pairs: list[tuple[float, float]]) -> RatioInterval | None:
    """The ratio numerator / denominator over `pairs`; None without a pair of positive values."""
    logs = [math.log(a / b) for a, b in pairs if a > 0 and b > 0]
    if not logs:
        return None
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return RatioInterval(math.exp(mean), math.exp(mean), math.exp(mean), 1)
    half = t975(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return RatioInterval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs))


RATIOS: tuple[tuple[str, str], ...] = (("v2 / v1", "v1"), ("v2 / anchor", "anchor"), ("v2 / raw bound", "raw"))


def pool_ratios(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """For each worker count, v2 against v1, the anchor's pool and the raw bound (messages/s / 2):
    the ratios of the pairs measured in the same repetition, their geometric mean and its 95 %
    interval, and whether it is within +-10 %."""
    out = []
    for n in sorted({s["workers"] for s in samples}):
        for name, other in RATIOS:
            rate = {(s["system"], s["repetition"]): s["units_per_s"] / (2 if s["system"] == "raw" else 1)
                    for s in samples if s["workers"] == n}  # fmt: skip
            pairs = [(v, rate[(other, rep)]) for (system, rep), v in rate.items()
                     if system == "v2" and (other, rep) in rate]  # fmt: skip
            found = paired_ratio(pairs)
            if found is None:
                continue
            out.append({"workers": n, "ratio": name, "value": round(found.ratio, 3), "low": round(found.low, 3),
                        "high": round(found.high, 3), "pairs": found.pairs,
                        "half_width_pct": round(found.half_width * 100, 1), "precise": found.precise,
                        "shown": found.shown()})  # fmt: skip
    return out

