"""What a scenario hands to its notebook and to the bundle: gates, tables, charts, transcripts.

A gate is computed by the scenario from database state read back after the fact; the report
only displays and saves it. `save(bundle_dir)` writes the JSON sidecar the runner reads
(`sidecars/<scenario>.json`), every table as CSV (`tables/`) and every chart as PNG (`charts/`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import re
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.figure import Figure

from evidence_lib.results.gate import DuplicateGate, Gate

PASS_STYLE = "background-color: #d4f4dd; color: #0b5d1e; font-weight: bold"
FAIL_STYLE = "background-color: #fbd5d5; color: #8a1111; font-weight: bold"


class UnlabelledChart(ValueError):
    """A chart without a title or an axis label: a reader could not tell what it measures."""


def tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """Float columns whose values are all whole numbers become integers (ids and counts read
    `2`, not `2.0`, and an advisory key reads `17605720`, not `1.760572e+07`)."""
    out = frame.copy()
    for column in out.columns:
        series = out[column]
        if pd.api.types.is_float_dtype(series) and series.notna().any():
            values = series.dropna()
            if bool(((values % 1) == 0).all()) and bool((values.abs() < 2**53).all()):
                out[column] = series.astype("Int64")
    return out


def _number(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    number = float(value)
    return f"{number:.3g}" if abs(number) < 1 else f"{number:,.2f}"


FRACTION_OF_A_SECOND = re.compile(r"(\d{2}:\d{2}:\d{2})[.,]\d+")


def to_the_second(value: Any) -> Any:
    """A time of day as a page shows it: to the second (the tables and sidecars keep every digit)."""
    if isinstance(value, dt.datetime):
        return value.replace(microsecond=0)
    return FRACTION_OF_A_SECOND.sub(r"\1", value) if isinstance(value, str) else value


def present(frame: pd.DataFrame) -> Any:
    """A table as a report shows it (see ScenarioResult.show): no index, numbers rounded, times
    to the second."""
    tidied = tidy(frame)
    for column in tidied.columns:
        if pd.api.types.is_datetime64_any_dtype(tidied[column]):
            tidied[column] = tidied[column].dt.floor("s")
        elif tidied[column].dtype == object:
            tidied[column] = tidied[column].map(to_the_second)
    floats: list[Hashable] = [c for c in tidied.columns if pd.api.types.is_float_dtype(tidied[c])]
    styler = tidied.style.hide(axis="index").format(na_rep="—")
    if floats:
        styler = styler.format(_number, subset=floats)
    return styler.set_table_styles([{"selector": "td, th", "props": "text-align: left; white-space: normal;"}])


@dataclass
class ScenarioResult:
    scenario: str
    title: str
    parameters: dict[str, Any]
    gates: list[Gate] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    charts: dict[str, Figure] = field(default_factory=dict)
    transcripts: list[str] = field(default_factory=list)
    timings: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    error: str | None = None
    headline: str = ""  # one line the index shows next to the scenario's verdict
    targets_missed: list[str] = field(default_factory=list)  # measurements below their targets (not gates)
    documents: dict[str, Any] = field(default_factory=dict)  # bundle-level JSON files (perf.json)
    escaped: list[BaseException] = field(default_factory=list)  # what stopped a part (never saved)

    # -- building ----------------------------------------------------------------------------

    def gate(self, name: str, passed: bool, detail: str = "", mode: str = "", point: str = "") -> bool:
        """Record a gate; its key (scenario, mode, name, point) must be new (DuplicateGate)."""
        gate = Gate(name, bool(passed), detail, mode, point)
        if any(g.key(self.scenario) == gate.key(self.scenario) for g in self.gates):
            raise DuplicateGate(f"gate {gate.key(self.scenario)} recorded twice")
        self.gates.append(gate)
        return bool(passed)

    def table(self, name: str, rows: list[dict[str, Any]] | pd.DataFrame) -> pd.DataFrame:
        frame = rows if isinstance(rows, pd.DataFrame) else pd.DataFrame(rows)
        self.tables[name] = frame
        return frame

    def append_rows(self, name: str, rows: list[dict[str, Any]]) -> pd.DataFrame:
        """Add rows to a table (created on first use)."""
        frame = self.tables.get(name)
        previous: list[dict[str, Any]] = (
            [] if frame is None else [{str(k): v for k, v in r.items()} for r in frame.to_dict("records")]
        )
        return self.table(name, previous + rows)

    @contextlib.contextmanager
    def capture_logs(self) -> Iterator[None]:
        """Collect evidence_lib and psycopg log records into this result (saved under logs/)
        instead of printing them into the notebook."""
        handler = _ListHandler(self.log_lines)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        loggers = [logging.getLogger(n) for n in ("evidence_lib", "psycopg")]  # psycopg: warnings only
        saved = [(lg.propagate, lg.level) for lg in loggers]
        for lg in loggers:
            lg.addHandler(handler)
            lg.propagate = False
            lg.setLevel(logging.INFO if lg.name == "evidence_lib" else logging.WARNING)
        try:
            yield
        finally:
            for lg, (propagate, level) in zip(loggers, saved, strict=True):
                lg.removeHandler(handler)
                lg.propagate = propagate
                lg.setLevel(level)

    def show(self, name: str) -> Any:
        """Table `name` for a report: no index column, integers as integers, "—" for missing
        values, every row and column, no cell cut short (a pandas Styler). A table the scenario
        never recorded (it stopped before, see its red gates) is shown as a one-line note, so the
        rest of the report still renders."""
        if name not in self.tables:
            return present(pd.DataFrame({"note": [f"no table {name}: the scenario did not record it (see the gates)"]}))
        return present(self.tables[name])

    def document(self, name: str, data: Any) -> None:
        """A machine-readable file saved at the bundle's top level (`perf.json`, ...)."""
        self.documents[name] = data

    def timing(self, phase: str, seconds: float, **labels: Any) -> None:
        self.timings.append({"phase": phase, "ms": seconds * 1000, **labels})

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.gates) and all(g.passed for g in self.gates)

    # -- showing -----------------------------------------------------------------------------

    def gates_frame(self) -> pd.DataFrame:
        return pd.DataFrame(
            [
                {
                    "mode": g.mode,
                    "gate": g.name + (f" @ {g.point}" if g.point else ""),
                    "verdict": "PASS" if g.passed else "FAIL",
                    "detail": g.detail,
                }
                for g in self.gates
            ]
        )

    def gates_table(self) -> Any:
        """The gate table with a clear pass/fail colour per gate (a pandas Styler)."""
        frame = self.gates_frame()
        if frame.empty:
            return frame
        return frame.style.map(
            lambda v: PASS_STYLE if v == "PASS" else FAIL_STYLE if v == "FAIL" else "", subset=["verdict"]
        ).format(to_the_second).hide(axis="index")

    def verdict(self) -> str:
        failed = [
            f"{g.mode + ': ' if g.mode else ''}{g.name}{' @ ' + g.point if g.point else ''}"
            for g in self.gates
            if not g.passed
        ]
        if self.error:
            return f"FAIL: the scenario raised {self.error}"
        if not self.gates:
            return "FAIL: no gate was computed"
        if failed:
            return f"FAIL: {len(failed)} red gate(s): {', '.join(failed)}"
        if self.targets_missed:
            return f"PASS, targets missed: {'; '.join(self.targets_missed)}"
        return "PASS: every gate is green"

    def timing_chart(self, name: str = "timings", title: str | None = None) -> Figure:
        """Horizontal bars of every measured phase (ms), one colour per label group."""
        frame = pd.DataFrame(self.timings)
        fig, ax = plt.subplots(figsize=(9, max(2.5, 0.3 * len(frame) + 1)))
        if not frame.empty:
            labels = [" / ".join(str(r[k]) for k in frame.columns if k not in ("ms",)) for _, r in frame.iterrows()]
            ax.barh(range(len(frame)), frame["ms"], color="#4c72b0")
            ax.set_yticks(range(len(frame)), labels, fontsize=8)
            ax.invert_yaxis()
        ax.set_xlabel("milliseconds")
        ax.set_ylabel("phase")
        ax.set_title(title or f"{self.title}: measured phases")
        fig.tight_layout()
        return self.chart(name, fig)

    def chart(self, name: str, fig: Figure) -> Figure:
        """Keep a chart for the notebook and the bundle; closed so it shows only where displayed.
        Every plot must carry a title and both axis labels (with units): UnlabelledChart if not."""
        plots = [ax for ax in fig.axes if ax.has_data()]
        missing = [f"plot {i + 1}: y label" for i, ax in enumerate(plots) if not ax.get_ylabel()]
        if plots and not (fig.get_suptitle() or any(ax.get_title() for ax in plots)):
            missing.append("a title")
        if plots and not any(ax.get_xlabel() for ax in plots):  # twin axes share one x label
            missing.append("an x label")
        if missing:
            plt.close(fig)
            raise UnlabelledChart(f"chart {name!r} of {self.scenario} lacks {', '.join(missing)}")
        plt.close(fig)
        self.charts[name] = fig
        return fig

    # -- saving ------------------------------------------------------------------------------

    def sidecar(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "title": self.title,
            "parameters": self.parameters,
            "passed": self.passed,
            "error": self.error,
            "gates": [g.__dict__ for g in self.gates],
            "tables": sorted(self.tables),
            "charts": sorted(self.charts),
            "timings": self.timings,
            "notes": self.notes,
            "headline": self.headline,
            "targets_missed": self.targets_missed,
            "transcripts": self.transcripts,
        }

    def save(self, bundle_dir: str | Path) -> Path | None:
        """Write sidecar, tables and charts into the bundle (nothing when bundle_dir is empty)."""
        if not bundle_dir:
            return None
        root = Path(bundle_dir)
        for sub in ("sidecars", "tables", "charts"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        for name, frame in self.tables.items():
            tidy(frame).to_csv(root / "tables" / f"{self.scenario}__{name}.csv", index=False)
        for name, fig in self.charts.items():
            fig.savefig(root / "charts" / f"{self.scenario}__{name}.png", dpi=110)
        (root / "logs").mkdir(parents=True, exist_ok=True)
        (root / "logs" / f"{self.scenario}.scenario.log").write_text("\n".join(self.log_lines) + "\n")
        for name, data in self.documents.items():
            (root / name).write_text(json.dumps(data, indent=1, default=_json_default))
        path = root / "sidecars" / f"{self.scenario}.json"
        path.write_text(json.dumps(self.sidecar(), indent=2, default=_json_default))
        return path


class _ListHandler(logging.Handler):
    def __init__(self, sink: list[str]) -> None:
        super().__init__(logging.INFO)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        self.sink.append(self.format(record))


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return str(value)
