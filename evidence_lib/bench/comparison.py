"""Raw PGMQ, the released anchor, v1 and v2 side by side: one server, one run, one client.

Each system gets its own scratch database on the same server (the anchor's from its npm
package, `anchor`); every connection is its own process running `plain.unit_loop`. For each
repetition the systems are measured one after another (interleaved, so a slow minute hurts all
of them alike), each after a warm-up, over a fixed window. Reported per system and connection
count: the median units/s with min and max over the repetitions, the server's CPU per unit (the
postmaster and its backends), and the CPU spent by other processes during each window (flagged
when it exceeds a quarter of a core: that repetition shared the machine). A measurement, never
a test; the ratios are what compares across machines.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from evidence_lib.bench import anchor as released
from evidence_lib.bench.plain import COUNT_SQL, SYSTEMS, System, prepare
from evidence_lib.bench.throughput import measure
from evidence_lib.pg import db, migrate
from evidence_lib.pg.db import Server, connect

FOREIGN_FLAG = 0.25  # cores of other processes' CPU during a window that flags the repetition
SYSTEM_ORDER: tuple[System, ...] = ("v2", "v1", "anchor", "raw")
TARGETS = {"v2_over_anchor": 1.2, "v2_over_bound": 0.40, "v2_cpu_ms_per_run": 6.0}  # issue 26: plain client


@dataclass
class Sample:
    system: System
    connections: int
    repetition: int
    units: int
    seconds: float
    server_cpu_s: float | None
    client_cpu_s: float
    foreign_cpu_s: float | None
    calls: dict[str, float] = field(default_factory=dict)  # call -> median ms

    @property
    def per_second(self) -> float:
        return self.units / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms_per_unit(self) -> float | None:
        return None if self.server_cpu_s is None or not self.units else self.server_cpu_s * 1000 / self.units

    @property
    def foreign_flag(self) -> bool:
        return self.foreign_cpu_s is not None and self.foreign_cpu_s / max(self.seconds, 1e-9) > FOREIGN_FLAG


@dataclass
class Comparison:
    samples: list[Sample] = field(default_factory=list)
    anchor_version: str = ""
    anchor_note: str = ""  # why the anchor was not measured, when it was not

    def of(self, system: System, connections: int) -> list[Sample]:
        return [s for s in self.samples if s.system == system and s.connections == connections]

    def median(self, system: System, connections: int, per_run: bool = True) -> float | None:
        values = [s.per_second / (2 if system == "raw" and per_run else 1) for s in self.of(system, connections)]
        return statistics.median(values) if values else None

    def table(self) -> list[dict[str, Any]]:
        """One row per system and connection count."""
        out = []
        for n in sorted({s.connections for s in self.samples}):
            for system in SYSTEMS:
                samples = self.of(system, n)
                if not samples:
                    out.append({"connections": n, "system": system, "note": self.anchor_note or "not measured"})
                    continue
                rates = [s.per_second for s in samples]
                cpu = [c for s in samples if (c := s.cpu_ms_per_unit) is not None]
                row: dict[str, Any] = {
                    "connections": n,
                    "system": system,
                    "unit": "message" if system == "raw" else "A -> B run",
                    "median_per_s": round(statistics.median(rates), 1),
                    "min_per_s": round(min(rates), 1),
                    "max_per_s": round(max(rates), 1),
                    "server_cpu_ms_per_unit": round(statistics.median(cpu), 2) if cpu else None,
                    "repetitions": len(samples),
                    "flagged_repetitions": sum(s.foreign_flag for s in samples),
                    "note": "",
                }
                out.append(row)
        return out

    def ratios(self) -> list[dict[str, Any]]:
        """v2 against the anchor, the raw bound (messages/s / 2) and v1; targets met or not."""
        out = []
        for n in sorted({s.connections for s in self.samples}):
            v2, v1, an, raw = (self.median(x, n) for x in SYSTEM_ORDER)
            cpu = [c for s in self.of("v2", n) if (c := s.cpu_ms_per_unit) is not None]
            v2_cpu = statistics.median(cpu) if cpu else None
            row: dict[str, Any] = {
                "connections": n,
                "v2_runs_per_s": v2,
                "anchor_runs_per_s": an,
                "v1_runs_per_s": v1,
                "raw_bound_runs_per_s": raw,
                "v2_over_anchor": round(v2 / an, 2) if v2 and an else None,
                "v2_over_bound": round(v2 / raw, 3) if v2 and raw else None,
                "v1_over_anchor": round(v1 / an, 2) if v1 and an else None,
                "v2_over_v1": round(v2 / v1, 2) if v2 and v1 else None,
                "v2_cpu_ms_per_run": round(v2_cpu, 2) if v2_cpu is not None else None,
            }
            row["targets_met"] = ", ".join(
                f"{k} {'met' if _met(k, row.get(k)) else 'missed'}" for k in TARGETS if row.get(k) is not None
            )
            out.append(row)
        return out


def _met(key: str, value: Any) -> bool:
    target = TARGETS[key]
    return bool(value is not None and (value <= target if key.endswith("ms_per_run") else value >= target))


@contextlib.contextmanager
def databases(server: Server, anchor_version: str, note: Callable[[str], None]) -> Iterator[dict[System, str]]:
    """One scratch database per system (the anchor's only when npm could fetch it)."""
    with contextlib.ExitStack() as stack:
        urls: dict[System, str] = {}
        for system in SYSTEMS:
            if system == "anchor":
                try:
                    fetched = released.fetch(anchor_version)
                except released.AnchorUnavailable as exc:
                    note(str(exc))
                    continue
                url = stack.enter_context(db.scratch_database(server, prefix="bench_anchor"))
                released.install(url, fetched)
            else:
                url = stack.enter_context(db.scratch_database(server, prefix=f"bench_{system}"))
                if system == "raw":
                    with connect(url) as conn:
                        migrate.ensure_pgmq(conn)
                else:
                    migrate.apply_migrations(url)
            urls[system] = url
        yield urls


def compare(
    server: Server,
    *,
    connections: tuple[int, ...] = (1, 2),
    repetitions: int = 5,
    seconds: float = 2.0,
    warmup: float = 0.5,
    anchor_version: str = released.DEFAULT_VERSION,
    progress: Callable[[str], None] | None = None,
) -> Comparison:
    result = Comparison(anchor_version=anchor_version)

    def note(text: str) -> None:
        result.anchor_note = text

    with databases(server, anchor_version, note) as urls:
        for system, url in urls.items():
            with connect(url) as conn:
                prepare(conn, system, max(connections))
        for repetition in range(1, repetitions + 1):
            for n in connections:
                for system, url in urls.items():
                    specs = [("plain", {"system": system, "index": i}) for i in range(n)]
                    out = measure(server, url, specs, COUNT_SQL[system], warmup, seconds)
                    sample = Sample(
                        system,
                        n,
                        repetition,
                        out["units"],
                        out["seconds"],
                        out["server_cpu"],
                        out["client_cpu"],
                        out["foreign_cpu"],
                        {k: v["p50_ms"] for k, v in out["calls"].summary_ms().items()},
                    )
                    result.samples.append(sample)
                    if progress:
                        progress(
                            f"comparison rep {repetition}/{repetitions}, {n} connection(s), {system}: "
                            f"{sample.per_second:.0f}/s"
                        )
    return result
