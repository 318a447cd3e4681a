"""The mutation report: `mutation.json` in the mutation-testing report schema that Stryker, Mull
and others share (npm `mutation-testing-report-schema`), its metrics (score = detected / valid,
and on covered code), the tables the notebook shows, and merging shards into one report.

Statuses are the schema's: an argued equivalent is `Ignored` (its argument in `statusReason`);
`CompileError` and `RuntimeError` count in neither detected nor valid.
"""

from __future__ import annotations

import difflib
import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence_lib import PROJECT_ROOT
from evidence_lib.errors import EvidenceError
from evidence_lib.mutation.mutant import DETECTED, Mutant, position
from evidence_lib.mutation.sweep import Sweep, digest

SCHEMA_VERSION = "2"
THRESHOLDS = {"high": 95, "low": 90}
FRAMEWORK = {"name": "dirty-runs-evidence mutation", "version": "1"}


class BadReport(EvidenceError):
    """A file given to merge is not a mutation report, or shards do not belong together."""


@dataclass(frozen=True)
class Metrics:
    killed: int = 0
    timeout: int = 0
    survived: int = 0
    no_coverage: int = 0
    compile_errors: int = 0
    runtime_errors: int = 0
    ignored: int = 0

    @property
    def detected(self) -> int:
        return self.killed + self.timeout

    @property
    def valid(self) -> int:
        return self.detected + self.survived + self.no_coverage

    @property
    def score(self) -> float:
        return 100.0 * self.detected / self.valid if self.valid else 100.0

    @property
    def score_on_covered(self) -> float:
        covered = self.detected + self.survived
        return 100.0 * self.detected / covered if covered else 100.0

    @staticmethod
    def of(statuses: Iterable[str]) -> Metrics:
        c = Counter(statuses)
        return Metrics(c["Killed"], c["Timeout"], c["Survived"], c["NoCoverage"], c["CompileError"],
                       c["RuntimeError"], c["Ignored"])  # fmt: skip

    def row(self) -> dict[str, Any]:
        return {"mutants": self.valid + self.compile_errors + self.runtime_errors + self.ignored,
                "killed": self.killed, "timeout": self.timeout, "survived": self.survived,
                "no_coverage": self.no_coverage, "equivalent (ignored)": self.ignored,
                "not compiling": self.compile_errors, "runtime errors": self.runtime_errors,
                "score %": round(self.score, 1), "score on covered %": round(self.score_on_covered, 1)}  # fmt: skip


def _location(text: str, mutant: Mutant) -> dict[str, Any]:
    start, end = position(text, mutant.location.start), position(text, max(mutant.location.end, mutant.location.start))
    if (end.line, end.column) <= (start.line, start.column):
        end = type(end)(start.line, start.column + 1)
    return {"start": {"line": start.line, "column": start.column}, "end": {"line": end.line, "column": end.column}}


def to_report(sweep: Sweep, *, dropped: dict[str, int] | None = None) -> dict[str, Any]:
    """The sweep as a report of the shared schema."""
    files: dict[str, dict[str, Any]] = {}
    for outcome in sweep.outcomes:
        m, v = outcome.mutant, outcome.verdict
        if m.file not in files:
            path = PROJECT_ROOT / m.file
            files[m.file] = {"language": "python" if m.file.endswith(".py") else "sql",
                             "source": path.read_text() if path.is_file() else "", "mutants": []}  # fmt: skip
        entry: dict[str, Any] = {
            "id": m.id,
            "mutatorName": f"{m.family}/{m.operator}",
            "replacement": m.replacement,
            "location": _location(files[m.file]["source"], m),
            "status": v.status,
            "statusReason": (f"{v.by}: {v.detail}" if v.by and v.status != "Ignored" else v.detail)[:2000],
            "description": f"{m.obj}: {m.family}/{m.operator}",
            "duration": round(v.seconds * 1000),
            "testsCompleted": v.parts_run + (1 if v.by.startswith("model") or v.parts_run else 0),
        }
        if v.status in DETECTED and v.by:
            entry["killedBy"] = [v.by]
        files[m.file]["mutants"].append(entry)
    return {
        "$schema": "https://git.io/mutation-testing-schema",
        "schemaVersion": SCHEMA_VERSION,
        "thresholds": THRESHOLDS,
        "projectRoot": ".",
        "files": files,
        "framework": FRAMEWORK,
        "config": {"revision": sweep.revision, "mode": sweep.mode, "shard": sweep.shard, "selected": sweep.selected,
                   "reused": sweep.reused, "seconds": round(sweep.seconds, 1), "dropped": dropped or {},
                   "generator": digest([m.id for m in sweep.generated.mutants]),
                   "planned": {"count": len(sweep.planned), "digest": digest(sweep.planned)},
                   "candidate_agrees": sweep.candidate_agrees, "candidate_problems": sweep.candidate_problems,
                   "stale_equivalents": sweep.stale_equivalents,
                   "phases": {k: round(v, 1) for k, v in sweep.phases.items()}},
    }  # fmt: skip


def statuses(report: dict[str, Any]) -> dict[str, str]:
    """mutant id -> status, over every file of a report."""
    return {m["id"]: m["status"] for f in report["files"].values() for m in f["mutants"]}


def metrics(report: dict[str, Any]) -> Metrics:
    return Metrics.of(statuses(report).values())


def _same(reports: list[dict[str, Any]], key: str, what: str) -> Any:
    values = {json.dumps(r.get("config", {}).get(key), sort_keys=True) for r in reports}
    if len(values) != 1:
        raise BadReport(f"shards of different {what} cannot be merged: {', '.join(sorted(values))}")
    return reports[0].get("config", {}).get(key)


def merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Shards of one sweep as one report. Refused (BadReport) unless every shard is of one revision,
    one generator version and one selection, no mutant appears twice, and together they hold
    every mutant of the selection: a missing shard is never a smaller, better-looking score."""
    if not reports:
        raise BadReport("merge needs at least one report")
    _same(reports, "revision", "revisions")
    if any("generator" not in r.get("config", {}) or "planned" not in r.get("config", {}) for r in reports):
        raise BadReport("a shard names no generator or selection (an older version made it): judge it again")
    _same(reports, "generator", "generator versions")
    planned = _same(reports, "planned", "selections")
    out: dict[str, Any] = json.loads(json.dumps(reports[0]))
    seen = statuses(out)
    for other in reports[1:]:
        for name, file in other["files"].items():
            target = out["files"].setdefault(name, {**file, "mutants": []})
            for mutant in file["mutants"]:
                if mutant["id"] in seen:
                    raise BadReport(f"mutant {mutant['id']} appears in two shards")
                seen[mutant["id"]] = mutant["status"]
                target["mutants"].append(mutant)
    if len(seen) != planned["count"] or digest(list(seen)) != planned["digest"]:
        raise BadReport(f"the shards hold {len(seen)} of the selection's {planned['count']} mutants: "
                        "a shard is missing, incomplete or of another selection")  # fmt: skip
    config = out["config"]
    config["shard"] = f"merged {len(reports)}"
    config["selected"] = sum(int(r["config"].get("selected", 0)) for r in reports)
    config["reused"] = sum(int(r["config"].get("reused", 0)) for r in reports)
    config["seconds"] = round(sum(float(r["config"].get("seconds", 0)) for r in reports), 1)
    config["candidate_agrees"] = all(r["config"].get("candidate_agrees", False) for r in reports)
    config["candidate_problems"] = [p for r in reports for p in r["config"].get("candidate_problems", [])]
    for file in out["files"].values():
        file["mutants"].sort(key=lambda m: (m["location"]["start"]["line"], m["location"]["start"]["column"], m["id"]))
    return out


def load(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadReport(f"{path}: not a mutation report ({exc})") from exc
    if not isinstance(data, dict) or "files" not in data or "schemaVersion" not in data:
        raise BadReport(f"{path}: not a mutation report (no schemaVersion and files)")
    return data


# -- tables --------------------------------------------------------------------------------


def by_key(sweep: Sweep, key: str) -> list[dict[str, Any]]:
    """Metrics per object or per family/operator (`key` "obj", "family" or "operator")."""
    groups: dict[str, list[str]] = {}
    for o in sweep.outcomes:
        name = o.mutant.obj if key == "obj" else o.mutant.family if key == "family" else \
            f"{o.mutant.family}/{o.mutant.operator}"  # fmt: skip
        groups.setdefault(name, []).append(o.verdict.status)
    rows = [{key if key != "obj" else "object": name, **Metrics.of(s).row()} for name, s in groups.items()]
    return sorted(rows, key=lambda r: (r["score %"], -r["mutants"]))


def in_context(mutant: Mutant, lines: int = 3) -> str:
    """The mutant as a unified diff of its file, with `lines` of context."""
    path = PROJECT_ROOT / mutant.file
    before = path.read_text() if path.is_file() else mutant.original
    spliced = mutant.family != "py-sql" and mutant.kind != "seam" and mutant.original
    if spliced and before[mutant.span.start : mutant.span.end] == mutant.original:
        after = before[: mutant.span.start] + mutant.replacement + before[mutant.span.end :]
    else:
        return f"--- {mutant.file}\n+++ mutant\n{mutant.replacement}"
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), mutant.file, f"mutant {mutant.id}",
                                lineterm="", n=lines)  # fmt: skip
    return "\n".join(diff)


def survivors(sweep: Sweep) -> list[dict[str, Any]]:
    rows = []
    for o in sweep.outcomes:
        if o.verdict.status in ("Survived", "NoCoverage"):
            m = o.mutant
            path = PROJECT_ROOT / m.file
            line = position(path.read_text(), m.location.start).line if path.is_file() else 0
            rows.append({"id": m.id, "status": o.verdict.status, "object": m.obj,
                         "operator": f"{m.family}/{m.operator}", "line": line, "why": o.verdict.detail,
                         "diff": in_context(m)})  # fmt: skip
    return rows
