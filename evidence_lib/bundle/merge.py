"""`python -m evidence_lib merge`: shards of one evidence run, made on several runners, as one dated
bundle with one index. Shards of one PostgreSQL major become one bundle; shards of several majors
become one matrix bundle (a `pg<N>/` folder per major, gates x versions), as `make matrix` writes.

Refused with one line (exit 2) and nothing written: a folder that is not a bundle, shards of
different revisions or migration artifacts, of different plans or shard counts, a shard given
twice, a missing shard, and an output folder that is not empty.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import fields
from pathlib import Path
from typing import Any

from evidence_lib import OUTPUTS_DIR
from evidence_lib.bundle.runner import gate_map
from evidence_lib.bundle.runs import NotebookRun
from evidence_lib.bundle.writer import finish_bundle
from evidence_lib.errors import BadInput

SUBFOLDERS = ("html", "tables", "charts", "sidecars", "logs")
REBUILT = {"index.html", "summary.md", "manifest.json", "bundle.zip", "report.pdf"}


class BadMerge(BadInput):
    """Shards that do not make one bundle."""


def _manifest(folder: Path) -> dict[str, Any]:
    path = folder / "manifest.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise BadMerge(f"{folder}: not an evidence bundle (no readable manifest.json)") from exc
    if "revision" not in data or "notebooks" not in data:
        raise BadMerge(f"{folder}: not an evidence bundle (its manifest names no revision or notebooks)")
    if data.get("matrix") and len({n.get("pg") for n in data["notebooks"]}) > 1:
        raise BadMerge(f"{folder}: already a matrix bundle; merge the shards it was made of")
    return data


def shard_of(manifest: dict[str, Any]) -> tuple[int, int, list[str]]:
    """(index, count, plan) of a bundle: an unsharded bundle is its own 1/1."""
    shard = manifest.get("shard") or {}
    spec = str(shard.get("spec") or "1/1")
    index, count = (int(x) for x in spec.split("/"))
    return index, count, list(shard.get("plan") or manifest.get("scenarios") or [])


def _major(manifest: dict[str, Any]) -> str:
    majors = {str(s.get("major")) for s in manifest.get("servers", [])}
    if len(majors) != 1:
        raise BadMerge(f"a shard ran on {len(majors)} servers: {', '.join(sorted(majors)) or 'none'}")
    return majors.pop()


def check(folders: list[Path]) -> dict[str, list[tuple[Path, dict[str, Any]]]]:
    """The shards by major, each major's complete; BadMerge (one line) otherwise."""
    if not folders:
        raise BadMerge("merge needs at least one bundle")
    loaded = [(f, _manifest(f)) for f in folders]
    for key, what in (("revision", "revisions"),):
        values = {m[key] for _, m in loaded}
        if len(values) > 1:
            raise BadMerge(f"shards of different {what} cannot be merged: {', '.join(sorted(values))}")
    artifacts = {m["migration_artifact"]["sha256"] for _, m in loaded}
    if len(artifacts) > 1:
        raise BadMerge(f"shards of different migration artifacts cannot be merged: {', '.join(sorted(artifacts))}")
    plans = {json.dumps(shard_of(m)[2]) for _, m in loaded}
    if len(plans) > 1:
        raise BadMerge("shards of different plans (scenario lists) cannot be merged")
    by_major: dict[str, list[tuple[Path, dict[str, Any]]]] = {}
    for folder, manifest in loaded:
        by_major.setdefault(_major(manifest), []).append((folder, manifest))
    for major, shards in by_major.items():
        counts = {shard_of(m)[1] for _, m in shards}
        if len(counts) > 1:
            raise BadMerge(f"PostgreSQL {major}: shards of different counts ({', '.join(map(str, sorted(counts)))})")
        count = counts.pop()
        seen = [shard_of(m)[0] for _, m in shards]
        twice = sorted({i for i in seen if seen.count(i) > 1})
        if twice:
            raise BadMerge(f"PostgreSQL {major}: shard {twice[0]}/{count} given twice")
        missing = sorted(set(range(1, count + 1)) - set(seen))
        if missing:
            raise BadMerge(f"PostgreSQL {major}: shard {missing[0]}/{count} is missing ({len(seen)} of {count} given)")
    return by_major


def _copy(source: Path, target: Path) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for item in sorted(source.iterdir()):
        if item.name in REBUILT or item.name in ("review",):
            continue
        dest = target / item.name
        if item.is_dir():
            if item.name in SUBFOLDERS or item.name == "coverage":
                for file in item.rglob("*"):
                    if file.is_file():
                        out = dest / file.relative_to(item)
                        if out.exists():
                            raise BadMerge(f"two shards hold {out.relative_to(target.parent)}: a scenario ran twice")
                        out.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(file, out)
        elif dest.exists():
            raise BadMerge(f"two shards hold {item.name}: a scenario ran twice")
        else:
            shutil.copy2(item, dest)


def _run(record: dict[str, Any], folder: str) -> NotebookRun:
    known = {f.name for f in fields(NotebookRun)}
    run = NotebookRun(**{k: v for k, v in record.items() if k in known})
    run.folder = folder
    run.notebook = f"{folder}{run.scenario}.ipynb"
    return run


def merge(folders: list[Path], out: Path | None = None) -> tuple[Path, int]:
    """Check the shards (nothing is written when they do not make one bundle), then write the
    merged bundle; returns its folder and exit code (0 green, 1 red, 3 artifact out of sync)."""
    by_major = check(folders)
    first = next(iter(by_major.values()))[0][1]
    now = dt.datetime.now(dt.UTC)
    target = out or OUTPUTS_DIR / f"{now.strftime('%Y%m%dT%H%M%SZ')}-{first['revision'][:12]}"
    if target.exists() and any(target.iterdir()):
        raise BadMerge(f"{target}: not empty; give an empty or new folder")
    matrix = len(by_major) > 1
    runs: list[NotebookRun] = []
    manifests = [m for shards in by_major.values() for _, m in shards]
    for major, shards in sorted(by_major.items(), key=lambda kv: -int(kv[0])):
        folder = f"pg{major}/" if matrix else ""
        for path, manifest in sorted(shards, key=lambda s: shard_of(s[1])[0]):
            _copy(path, target / folder if folder else target)
            runs += [_run(r, folder) for r in manifest["notebooks"]]
    manifest = _merged(first, manifests, runs, matrix, folders)
    problems = finish_bundle(target, manifest, runs)
    manifest.setdefault("merge_warnings", problems)
    return target, int(manifest["exit_code"])


def _merged(first: dict[str, Any], manifests: list[dict[str, Any]], runs: list[NotebookRun], matrix: bool,
            folders: list[Path]) -> dict[str, Any]:  # fmt: skip
    merged = dict(first)
    merged.pop("shard", None)
    merged["matrix"] = matrix
    merged["merged_from"] = [{"bundle": str(f), "shard": (m.get("shard") or {}).get("spec", "1/1"),
                              "postgresql": _major(m), "started_at": m.get("started_at"),
                              "finished_at": m.get("finished_at"), "exit_code": m.get("exit_code")}
                             for f, m in zip(folders, manifests, strict=True)]  # fmt: skip
    merged["servers"] = list({_major(m): m["servers"][0] for m in manifests}.values())
    merged["notebooks"] = [r.record() for r in runs]
    merged["gates"] = gate_map(runs)
    merged["parameters"] = {k: v for m in manifests for k, v in m.get("parameters", {}).items()}
    merged["schedule"] = [s | {"shard": (m.get("shard") or {}).get("spec", "1/1")}
                          for m in manifests for s in m.get("schedule", [])]  # fmt: skip
    merged["started_at"] = min(str(m["started_at"]) for m in manifests)
    merged["finished_at"] = max(str(m.get("finished_at", "")) for m in manifests)
    merged["interrupted"] = any(m.get("interrupted") for m in manifests)
    merged["dirty"] = any(m.get("dirty") for m in manifests)
    merged["dirty_files"] = sorted({f for m in manifests for f in m.get("dirty_files", [])})
    merged["not_candidate_reasons"] = sorted({r for m in manifests for r in m.get("not_candidate_reasons", [])})
    merged["candidate"] = not merged["not_candidate_reasons"]
    merged["not_run"] = [n for m in manifests for n in m.get("not_run", [])]
    in_sync = all(m.get("schema_sync", {}).get("in_sync", True) for m in manifests)
    green = bool(runs) and all(r.passed for r in runs)
    merged["passed"] = not merged["interrupted"] and green and not merged["not_run"]
    merged["exit_code"] = 130 if merged["interrupted"] else 3 if not in_sync else 0 if merged["passed"] else 1
    return merged
