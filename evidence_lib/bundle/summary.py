"""summary.md: the bundle as a GitHub-flavoured markdown comment, to paste into an issue or a
pull request (GitHub Actions shows it as the job summary): verdict, candidate stamp, revision,
artifact sha256, gates per scenario, every red gate, the performance headline ratios. It stays
well under GitHub's 65,536-character comment limit (long lists are cut with a count)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from evidence_lib.bundle.runs import NotebookRun, overall_verdict, server_text, stamp_text

# scenario stem -> the table whose rows are its headline ratios
HEADLINE_TABLES = {"07_performance": "pool_ratios"}
HEADLINE_COLUMNS = ("workers", "ratio", "shown", "half_width_pct", "precise")
MAX_LINES = 60


def _icon(verdict: str) -> str:
    if verdict.startswith("PASS, targets"):
        return "🟡"
    return "✅" if verdict.startswith("PASS") else "⏸️" if verdict == "INTERRUPTED" else "❌"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _cut(lines: list[str]) -> list[str]:
    return lines if len(lines) <= MAX_LINES else [*lines[:MAX_LINES], f"- … and {len(lines) - MAX_LINES} more"]


def summary_markdown(bundle: Path, manifest: dict[str, Any], runs: list[NotebookRun]) -> str:
    verdict = overall_verdict(manifest, runs)
    artifact = manifest["migration_artifact"]
    lines = [
        f"## {_icon(verdict)} Dirty Runs evidence: {verdict}",
        "",
        f"**{_cell(stamp_text(manifest))}**",
        "",
        "| | |",
        "|---|---|",
        f"| revision | `{manifest['revision']}`{' (dirty tree)' if manifest.get('dirty') else ''} |",
        f"| migration artifact | `{artifact['path']}` |",
        f"| artifact sha256 | `{artifact['sha256']}` |",
        f"| date (UTC) | {manifest['started_at']} |",
        f"| server | {_cell(server_text(manifest))} |",
        f"| PGMQ SQL | {manifest.get('pgmq', {}).get('sql', '?')} |",
        f"| reproduce | `{manifest.get('reproduce', '')}` |",
        "",
        "### Scenarios",
        "",
        "| scenario | verdict | gates green | summary | time (s) |",
        "|---|---|---:|---|---:|",
    ]
    for r in runs:
        green = sum(1 for g in r.gates if g["passed"])
        lines.append(
            f"| {r.label} | {_icon(r.verdict)} {_cell(r.brief)} | {green}/{len(r.gates)} | "
            f"{_cell(r.headline)} | {r.seconds:.0f} |"
        )
    red = [f"- `{r.label}` {_cell(name)}: {_cell(_detail(r, name))}" for r in runs for name in r.red]
    errors = [f"- `{r.label}` {r.status}: {_cell(r.error[:300])}" for r in runs if r.error]
    lines += ["", "### Red gates", "", *(_cut(red + errors) or ["none"])]
    for r in runs:
        table = HEADLINE_TABLES.get(r.scenario)
        path = bundle / r.folder / "tables" / f"{r.scenario}__{table}.csv" if table else None
        if path is not None and path.exists():
            lines += ["", f"### Performance headline ({r.label})", "", *_headline(path)]
        if r.targets_missed:
            lines += ["", f"Targets missed ({r.label}, measurements, not gates):", ""]
            lines += _cut([f"- {_cell(m)}" for m in r.targets_missed])
    lines += ["", f"<sub>bundle `{bundle.name}` · {len(manifest.get('gates', {}))} gates</sub>", ""]
    return "\n".join(lines)


def _detail(run: NotebookRun, label: str) -> str:
    for g in run.gates:
        name = (f"{g['mode']}: " if g.get("mode") else "") + g["name"] + (f" @ {g['point']}" if g.get("point") else "")
        if name == label:
            return str(g.get("detail", ""))[:300]
    return ""


def _headline(path: Path) -> list[str]:
    with path.open(newline="") as source:
        rows = list(csv.DictReader(source))
    columns = [c for c in HEADLINE_COLUMNS if rows and c in rows[0]]
    if not columns:
        return ["(no ratios)"]
    out = ["| " + " | ".join(columns) + " |", "|" + "---:|" * len(columns)]
    out += ["| " + " | ".join(_cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return out
