"""`python -m evidence_lib compare OLD NEW`: what changed between two bundles, as HTML and markdown.

Revision, migration artifact and server changes; gates that flipped, appeared or vanished;
performance deltas judged against the spread of the repetitions (a system's runs/s is flagged
only when the two min-max ranges do not overlap: a change inside the noise is shown, not
flagged); scenario timings. Everything is read from the two bundles' files, nothing is re-run.
"""

from __future__ import annotations

import csv
import html
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence_lib.bundle.writer import load_manifest

PERF_TABLE = "07_performance__comparison.csv"
RATIO_TABLE = "07_performance__comparison_ratios.csv"
RATIOS = ("v2_over_anchor", "v2_over_v1", "v2_over_bound")
POOL_SAMPLES = "07_performance__pools_samples.csv"  # the worker pools, one row per measurement
POOL_RATIOS = "07_performance__pool_ratios.csv"  # the pools' paired ratios with their intervals


@dataclass
class PerfDelta:
    where: str  # "" or the matrix folder
    connections: str
    system: str
    old: tuple[float, float, float]  # median, min, max (per s)
    new: tuple[float, float, float]

    @property
    def change(self) -> float:
        return (self.new[0] - self.old[0]) / self.old[0] if self.old[0] else 0.0

    @property
    def judged(self) -> str:
        """"faster" / "slower" only beyond the spread of both runs' repetitions, else "within noise"."""
        if self.new[1] > self.old[2]:
            return "faster"
        if self.new[2] < self.old[1]:
            return "slower"
        return "within noise"


@dataclass
class Comparison:
    old: Path
    new: Path
    facts: list[tuple[str, str, str]] = field(default_factory=list)  # (what, old, new), changed ones marked
    flipped: list[tuple[str, str, str]] = field(default_factory=list)  # (key, old verdict, new verdict)
    appeared: list[tuple[str, str]] = field(default_factory=list)
    vanished: list[tuple[str, str]] = field(default_factory=list)
    perf: list[PerfDelta] = field(default_factory=list)
    timings: list[tuple[str, float | None, float | None]] = field(default_factory=list)
    ratios: list[tuple[str, str, str, str]] = field(default_factory=list)  # (connections, ratio, old, new)
    unchanged_gates: int = 0

    @property
    def newly_red(self) -> list[str]:
        return [k for k, _, v in self.flipped if v != "PASS"] + [k for k, v in self.appeared if v != "PASS"]


def compare_bundles(old: Path, new: Path) -> Comparison:
    a, b = load_manifest(old), load_manifest(new)
    c = Comparison(old, new)
    c.facts = [
        ("verdict", _verdict(a), _verdict(b)),
        ("revision", a["revision"][:12] + (" (dirty)" if a.get("dirty") else ""),
         b["revision"][:12] + (" (dirty)" if b.get("dirty") else "")),
        ("migration artifact", a["migration_artifact"]["path"], b["migration_artifact"]["path"]),
        ("artifact sha256", a["migration_artifact"]["sha256"][:16], b["migration_artifact"]["sha256"][:16]),
        ("candidate evidence", str(a.get("candidate")), str(b.get("candidate"))),
        ("server", _servers(a), _servers(b)),
        ("PGMQ SQL", str(a.get("pgmq", {}).get("sql", "?")), str(b.get("pgmq", {}).get("sql", "?"))),
        ("machine", _machine(a), _machine(b)),
        ("started (UTC)", str(a.get("started_at", "")), str(b.get("started_at", ""))),
    ]  # fmt: skip
    ga, gb = a["gates"], b["gates"]
    c.flipped = [(k, ga[k], gb[k]) for k in sorted(ga.keys() & gb.keys()) if ga[k] != gb[k]]
    c.unchanged_gates = sum(1 for k in ga.keys() & gb.keys() if ga[k] == gb[k])
    c.appeared = [(k, gb[k]) for k in sorted(gb.keys() - ga.keys())]
    c.vanished = [(k, ga[k]) for k in sorted(ga.keys() - gb.keys())]
    c.perf = _perf(old, new)
    c.ratios = _ratios(old, new)
    ta = {_label(n): n.get("seconds") for n in a["notebooks"]}
    tb = {_label(n): n.get("seconds") for n in b["notebooks"]}
    c.timings = [(k, ta.get(k), tb.get(k)) for k in dict.fromkeys([*ta, *tb])]
    return c


def _label(notebook: dict[str, Any]) -> str:
    return str(notebook["scenario"]) + (f" @ pg{notebook['pg']}" if notebook.get("folder") else "")


def _verdict(m: dict[str, Any]) -> str:
    return "INTERRUPTED" if m.get("interrupted") else "PASS" if m.get("passed") else "FAIL"


def _servers(m: dict[str, Any]) -> str:
    servers = m.get("servers") or ([m["server"]] if "server" in m else [])
    return ", ".join(
        str((s.get("settings") or {}).get("server_version") or s.get("postgresql") or "?") for s in servers
    )


def _machine(m: dict[str, Any]) -> str:
    machine = m.get("machine") or {}
    return f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores" if machine else "not recorded"


def _read_perf(bundle: Path) -> dict[tuple[str, str, str], tuple[float, float, float]]:
    out = {}
    for path in sorted(bundle.glob(f"**/tables/{PERF_TABLE}")):
        where = str(path.parent.parent.relative_to(bundle)).replace(".", "")
        with path.open(newline="") as source:
            for row in csv.DictReader(source):
                try:
                    values = (float(row["median_per_s"]), float(row["min_per_s"]), float(row["max_per_s"]))
                except (KeyError, ValueError):
                    continue
                out[where, row["connections"], row["system"]] = values
    return out


def _read_pools(bundle: Path) -> dict[tuple[str, str, str], tuple[float, float, float]]:
    """The worker pools' repetitions as (median, min, max) per (folder, "N workers", "pool <system>")."""
    rates: dict[tuple[str, str, str], list[float]] = {}
    for path in sorted(bundle.glob(f"**/tables/{POOL_SAMPLES}")):
        where = str(path.parent.parent.relative_to(bundle)).replace(".", "")
        with path.open(newline="") as source:
            for row in csv.DictReader(source):
                try:
                    rate = float(row["units_per_s"])
                except (KeyError, ValueError):
                    continue
                rates.setdefault((where, f"{row['workers']} workers", f"pool {row['system']}"), []).append(rate)
    return {k: (statistics.median(v), min(v), max(v)) for k, v in rates.items()}


def _perf(old: Path, new: Path) -> list[PerfDelta]:
    a, b = _read_perf(old) | _read_pools(old), _read_perf(new) | _read_pools(new)
    return [PerfDelta(k[0], k[1], k[2], a[k], b[k]) for k in a if k in b]


def _ratios(old: Path, new: Path) -> list[tuple[str, str, str, str]]:
    def read(bundle: Path) -> dict[tuple[str, str], str]:
        out = {}
        for path in sorted(bundle.glob(f"**/tables/{RATIO_TABLE}")):
            with path.open(newline="") as source:
                for row in csv.DictReader(source):
                    out.update({(row.get("connections", ""), k): row.get(k, "") for k in RATIOS})
        for path in sorted(bundle.glob(f"**/tables/{POOL_RATIOS}")):
            with path.open(newline="") as source:
                for row in csv.DictReader(source):  # a pool ratio with its 95 % interval
                    out[(f"{row.get('workers', '')} workers", f"pools {row.get('ratio', '')}")] = row.get("shown", "")
        return out

    a, b = read(old), read(new)
    return [(k[0], k[1], a[k], b[k]) for k in a if k in b]


def machine_moved(c: Comparison) -> str:
    """A sentence when raw PGMQ itself moved beyond its spread: the machine changed, not the engine."""
    raw = [p for p in c.perf if p.system in ("raw", "pool raw") and p.judged != "within noise"]
    if not raw:
        return ""
    change = sum(p.change for p in raw) / len(raw)
    return (f"Raw PGMQ itself is {abs(change):.0%} {'slower' if change < 0 else 'faster'} beyond its spread: "
            "the machine changed between the runs; judge the engine by the ratios, which cancel it.")  # fmt: skip


def _secs(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def to_markdown(c: Comparison) -> str:
    lines = [f"## Evidence compared: `{c.old.name}` → `{c.new.name}`", ""]
    red = c.newly_red
    lines += [f"**{len(red)} gate(s) newly red**" if red else "**No gate newly red.**", ""]
    lines += ["| | old | new |", "|---|---|---|"]
    lines += [f"| {w}{' **(changed)**' if o != n else ''} | {o} | {n} |" for w, o, n in c.facts]
    lines += ["", f"### Gates ({c.unchanged_gates} unchanged)", ""]
    lines += [f"- flipped `{k}`: {o} → **{n}**" for k, o, n in c.flipped] or ["- none flipped"]
    lines += [f"- appeared `{k}`: {v}" for k, v in c.appeared]
    lines += [f"- vanished `{k}` (was {v})" for k, v in c.vanished]
    lines += ["", "### Performance (runs/s median [min-max]; flagged only beyond the spread)", ""]
    if c.perf:
        lines += ["| where | connections | system | old | new | change | judged |", "|---|---:|---|---|---|---:|---|"]
        lines += [
            f"| {p.where or '-'} | {p.connections} | {p.system} | {p.old[0]:.1f} [{p.old[1]:.1f}-{p.old[2]:.1f}] | "
            f"{p.new[0]:.1f} [{p.new[1]:.1f}-{p.new[2]:.1f}] | {p.change:+.1%} | "
            f"{'**' + p.judged + '**' if p.judged != 'within noise' else p.judged} |"
            for p in c.perf
        ]
        moved = machine_moved(c)
        lines += ["", f"**{moved}**"] if moved else []
    else:
        lines.append("no performance table in both bundles")
    if c.ratios:
        lines += ["", "| connections | ratio | old | new |", "|---:|---|---:|---:|"]
        lines += [f"| {n} | {k} | {o} | {w} |" for n, k, o, w in c.ratios]
    lines += ["", "### Scenario timings (s)", "", "| scenario | old | new |", "|---|---:|---:|"]
    lines += [f"| {k} | {_secs(o)} | {_secs(n)} |" for k, o, n in c.timings]
    return "\n".join(lines) + "\n"


def to_html(c: Comparison) -> str:
    e = html.escape
    facts = "".join(
        f"<tr{' style=background:#fff3cd' if o != n else ''}><th>{e(w)}</th><td>{e(o)}</td><td>{e(n)}</td></tr>"
        for w, o, n in c.facts
    )
    gates = "".join(
        f"<tr><td>flipped</td><td><code>{e(k)}</code></td><td>{e(o)}</td><td>{_verdict_cell(n)}</td></tr>"
        for k, o, n in c.flipped
    ) + "".join(
        f"<tr><td>appeared</td><td><code>{e(k)}</code></td><td>—</td><td>{_verdict_cell(v)}</td></tr>"
        for k, v in c.appeared
    ) + "".join(
        f"<tr><td>vanished</td><td><code>{e(k)}</code></td><td>{e(v)}</td><td>—</td></tr>" for k, v in c.vanished
    )  # fmt: skip
    perf = "".join(
        f"<tr><td>{e(p.where or '-')}</td><td>{e(p.connections)}</td><td>{e(p.system)}</td>"
        f"<td>{p.old[0]:.1f} [{p.old[1]:.1f}–{p.old[2]:.1f}]</td>"
        f"<td>{p.new[0]:.1f} [{p.new[1]:.1f}–{p.new[2]:.1f}]</td>"
        f"<td>{p.change:+.1%}</td><td{' style=font-weight:bold' if p.judged != 'within noise' else ''}>"
        f"{e(p.judged)}</td></tr>"
        for p in c.perf
    )
    timings = "".join(f"<tr><td>{e(k)}</td><td>{_secs(o)}</td><td>{_secs(n)}</td></tr>" for k, o, n in c.timings)
    ratios = "".join(
        f"<tr><td>{e(n)}</td><td>{e(k)}</td><td>{e(o)}</td><td>{e(w)}</td></tr>" for n, k, o, w in c.ratios
    )
    moved = machine_moved(c)
    red = c.newly_red
    return f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<title>Evidence compared: {e(c.old.name)} → {e(c.new.name)}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}}
table{{border-collapse:collapse;margin:.5em 0 1.5em}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}th{{background:#f2f2f2}}</style></head><body>
<h1>Evidence compared</h1><p><code>{e(str(c.old))}</code> → <code>{e(str(c.new))}</code></p>
<p style="font-weight:bold;padding:8px;background:{'#fbd5d5' if red else '#d4f4dd'}">
{f"{len(red)} gate(s) newly red" if red else "No gate newly red"}</p>
<table><tr><th></th><th>old</th><th>new</th></tr>{facts}</table>
<h2>Gates ({c.unchanged_gates} unchanged)</h2>
<table><tr><th>change</th><th>gate</th><th>old</th><th>new</th></tr>
{gates or '<tr><td colspan=4>none</td></tr>'}</table>
<h2>Performance</h2><p>Runs/s, median [min–max] of the repetitions. A change is flagged only when the two
ranges do not overlap.</p>
<table><tr><th>where</th><th>connections</th><th>system</th><th>old (per s)</th><th>new (per s)</th>
<th>change</th><th>judged</th></tr>{perf or '<tr><td colspan=7>no performance table in both bundles</td></tr>'}</table>
{f"<p><b>{e(moved)}</b></p>" if moved else ""}
<table><tr><th>connections</th><th>ratio</th><th>old</th><th>new</th></tr>{ratios}</table>
<h2>Scenario timings</h2><table><tr><th>scenario</th><th>old (s)</th><th>new (s)</th></tr>{timings}</table>
</body></html>"""


def _verdict_cell(verdict: str) -> str:
    colour = "#d4f4dd" if verdict == "PASS" else "#fbd5d5"
    return f'<span style="background:{colour};font-weight:bold;padding:1px 4px">{html.escape(verdict)}</span>'


def write_comparison(old: Path, new: Path, out: Path | None = None) -> tuple[Comparison, Path]:
    """Compare and write compare.html and compare.md into `out` (default: next to NEW)."""
    c = compare_bundles(old, new)
    target = out or new.parent / f"compare-{old.name}-vs-{new.name}"
    target.mkdir(parents=True, exist_ok=True)
    (target / "compare.md").write_text(to_markdown(c))
    (target / "compare.html").write_text(to_html(c))
    return c, target
