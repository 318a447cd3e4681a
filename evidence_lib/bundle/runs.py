"""One notebook run in a bundle, its verdict, and the header every page of a bundle carries.

A report attached to an issue travels alone: its header says which revision, which migration
artifact (sha256), when, on which server, whether the run is candidate evidence, and the
verdict, so the page is proof without the rest of the bundle.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

NOT_CANDIDATE = "NOT CANDIDATE EVIDENCE"
INTERRUPTED = "INTERRUPTED"


@dataclass
class NotebookRun:
    scenario: str  # the notebook stem, e.g. 03_races
    notebook: str  # its path inside the bundle
    status: str = "not run"  # ok, cell_error, timeout, runner_error, interrupted
    error: str = ""
    seconds: float = 0.0
    parameters: dict[str, Any] = field(default_factory=dict)  # every parameter with the value used
    gates: list[dict[str, Any]] = field(default_factory=list)
    cells: list[dict[str, Any]] = field(default_factory=list)
    headline: str = ""  # the scenario's one-line summary, e.g. "negative controls: 30 of 30 killed"
    targets_missed: list[str] = field(default_factory=list)  # measurements below target (not gates)
    pg: str = ""  # the server's major version
    folder: str = ""  # "" in a one-server bundle, "pg15/" in a matrix bundle
    started_at: float = 0.0  # seconds after the run's start (scenarios may run side by side)
    finished_at: float = 0.0
    critical: bool = False  # it ended its phase last: on the run's critical path

    @property
    def passed(self) -> bool:
        return self.status == "ok" and bool(self.gates) and all(g["passed"] for g in self.gates)

    @property
    def label(self) -> str:
        """The scenario with its server in a matrix bundle ("03_races @ pg15")."""
        return f"{self.scenario} @ pg{self.pg}" if self.folder else self.scenario

    @property
    def red(self) -> list[str]:
        return [
            (f"{g['mode']}: " if g.get("mode") else "") + g["name"] + (f" @ {g['point']}" if g.get("point") else "")
            for g in self.gates
            if not g["passed"]
        ]

    @property
    def verdict(self) -> str:
        """PASS, "PASS, targets missed: ...", FAIL or INTERRUPTED: a missed target is not a red gate."""
        if self.status == "interrupted":
            return INTERRUPTED
        if not self.passed:
            return "FAIL"
        if self.targets_missed:
            return "PASS, targets missed: " + "; ".join(self.targets_missed)
        return "PASS"

    @property
    def brief(self) -> str:
        """The verdict for a table cell: the missed targets counted, listed elsewhere."""
        if self.verdict.startswith("PASS, targets missed"):
            return f"PASS, targets missed: {len(self.targets_missed)}"
        return self.verdict

    def record(self) -> dict[str, Any]:
        return self.__dict__ | {"passed": self.passed, "verdict": self.verdict}


def overall_verdict(manifest: dict[str, Any], runs: list[NotebookRun]) -> str:
    if manifest.get("interrupted"):
        return "INTERRUPTED"
    if not manifest["passed"]:
        return "FAIL"
    missed = [r.label for r in runs if r.targets_missed]
    return f"PASS, targets missed: {', '.join(missed)}" if missed else "PASS"


def verdict_colour(verdict: str) -> tuple[str, str]:
    if verdict.startswith("PASS, targets"):
        return "#fff3cd", "#6b4e00"
    if verdict.startswith("PASS"):
        return "#d4f4dd", "#0b5d1e"
    return "#fbd5d5", "#8a1111"


def stamp_text(manifest: dict[str, Any]) -> str:
    if manifest.get("interrupted"):
        return f"{INTERRUPTED}: the run was stopped before every scenario ran; " + (
            "not candidate evidence" if manifest["candidate"] else "what ran is listed"
        )
    if manifest["candidate"]:
        return (
            f"Candidate evidence: clean tree at revision {manifest['revision'][:12]}, "
            "migration artifact in sync with sql/."
        )
    return f"{NOT_CANDIDATE}: {'; '.join(manifest['not_candidate_reasons'])}"


def server_text(manifest: dict[str, Any], pg: str = "") -> str:
    servers = manifest.get("servers") or []
    chosen = [s for s in servers if not pg or s.get("major") == pg] or servers
    return " · ".join(
        f"PostgreSQL {s['settings'].get('server_version', '?')} ({s.get('origin') or s.get('kind')}; "
        f"fsync {s['settings'].get('fsync', '?')}, synchronous_commit {s['settings'].get('synchronous_commit', '?')})"
        for s in chosen
    )


def header_html(manifest: dict[str, Any], verdict: str, *, title: str, pg: str = "") -> str:
    """The header of a report or of the index, with inline styles (it is pasted into nbconvert's
    page as well as into ours)."""
    ok = manifest["candidate"] and not manifest.get("interrupted")
    stamp_bg, stamp_fg = ("#d4f4dd", "#0b5d1e") if ok else ("#8a1111", "white")
    bg, fg = verdict_colour(verdict)
    artifact = manifest["migration_artifact"]
    rows = [
        ("verdict", f'<span data-verdict style="background:{bg};color:{fg};font-weight:bold;padding:2px 6px">'
                    f"{html.escape(verdict)}</span>"),
        ("revision", f"<code>{html.escape(manifest['revision'])}</code>"
                     + (" (dirty tree)" if manifest.get("dirty") else "")),
        ("migration artifact", f"<code>{html.escape(artifact['path'])}</code>"),
        ("artifact sha256", f"<code>{html.escape(artifact['sha256'])}</code>"),
        ("date (UTC)", html.escape(str(manifest["started_at"]))),
        ("server", html.escape(server_text(manifest, pg))),
    ]  # fmt: skip
    table = "".join(
        f'<tr><th style="text-align:left;padding:2px 8px">{k}</th><td style="padding:2px 8px">{v}</td></tr>'
        for k, v in rows
    )
    return (
        f'<div class="evidence-header"><h1 style="margin-bottom:4px">{html.escape(title)}</h1>'
        f'<div style="background:{stamp_bg};color:{stamp_fg};padding:8px;font-weight:bold">'
        f"{html.escape(stamp_text(manifest))}</div><table>{table}</table></div>"
    )
