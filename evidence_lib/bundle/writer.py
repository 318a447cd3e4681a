"""The evidence bundle's own files, written after every notebook ran (whatever happened, an
interrupted run included), so a red run is as complete as a green one: manifest.json,
index.html, summary.md (also appended to `$GITHUB_STEP_SUMMARY` in GitHub Actions), bundle.zip,
and a check that each page and the zip fit GitHub's attachment limits."""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path
from typing import Any

from evidence_lib.bundle.index import write_index
from evidence_lib.bundle.runs import NotebookRun
from evidence_lib.bundle.summary import summary_markdown
from evidence_lib.errors import EvidenceError

HTML_LIMIT = 5 * 1024 * 1024  # one report, attached alone
ZIP_LIMIT = 25 * 1024 * 1024  # GitHub's attachment limit
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


def finish_bundle(bundle: Path, manifest: dict[str, Any], runs: list[NotebookRun]) -> list[str]:
    """Write manifest, index, summary and zip; return the size problems (empty when none)."""
    manifest["sizes"] = html_sizes(bundle)
    problems = [f"{name} is {size / 1e6:.1f} MB (limit 5 MB)" for name, size in manifest["sizes"].items()
                if size > HTML_LIMIT]  # fmt: skip
    write_manifest(bundle, manifest)
    write_index(bundle, manifest, runs)
    summary = summary_markdown(bundle, manifest, runs)
    (bundle / "summary.md").write_text(summary)
    problems += reviewed(bundle, manifest)
    if manifest.get("review"):
        write_manifest(bundle, manifest)
    step_summary = os.environ.get(STEP_SUMMARY_ENV)
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as sink:
            sink.write(summary + "\n")
    archive = write_zip(bundle)
    if archive.stat().st_size > ZIP_LIMIT:
        problems.append(f"bundle.zip is {archive.stat().st_size / 1e6:.1f} MB (GitHub's limit is 25 MB)")
    return problems


def reviewed(bundle: Path, manifest: dict[str, Any]) -> list[str]:
    """The pages checked in headless Chromium (screenshots in review/) and report.pdf printed,
    when a Chromium is here; otherwise said plainly, in the manifest and the problems."""
    from evidence_lib.bundle import review

    missing = review.browser_missing()
    if missing:
        manifest["review"] = {"skipped": missing}
        return [f"pages not checked in a browser and no report.pdf: {missing}"]
    try:
        reviews = review.review_bundle(bundle)
        review.print_pdf(bundle)
    except Exception as exc:  # a browser that fails to start must not lose the bundle
        manifest["review"] = {"skipped": f"the browser failed: {exc}"}
        return [f"pages not checked in a browser: {exc}"]
    bad = [r for r in reviews if not r.passed]
    manifest["review"] = {"pages": len(reviews), "failed": {r.page: r.problems for r in bad}, "pdf": "report.pdf"}
    return [f"review: {r.page}: {'; '.join(f'{k}: {v[0]}' for k, v in r.problems.items())}" for r in bad]


def html_sizes(bundle: Path) -> dict[str, int]:
    """Every report's size in bytes, by its path in the bundle (index.html is written later and
    checked by the tests)."""
    return {str(p.relative_to(bundle)): p.stat().st_size for p in sorted(bundle.rglob("*.html"))}


def write_manifest(bundle: Path, manifest: dict[str, Any]) -> Path:
    path = bundle / "manifest.json"
    path.write_text(json.dumps(manifest, indent=2, default=str))
    return path


def write_zip(bundle: Path) -> Path:
    target = bundle / "bundle.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(bundle.rglob("*")):
            if path.is_file() and path != target:
                archive.write(path, f"{bundle.name}/{path.relative_to(bundle)}")
    return target


def load_manifest(bundle: Path) -> dict[str, Any]:
    """A bundle's manifest; a path that is not a bundle raises NotABundle with what is wrong."""
    if not bundle.is_dir():
        raise NotABundle(f"{bundle} is not a folder (a bundle is a folder under outputs/)")
    path = bundle / "manifest.json"
    if not path.is_file():
        raise NotABundle(f"{bundle} is not an evidence bundle: it has no manifest.json")
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise NotABundle(f"{path} is not valid JSON: {exc}") from exc
    missing = [k for k in ("revision", "migration_artifact", "gates", "notebooks") if k not in manifest]
    if missing:
        raise NotABundle(f"{path} is not a bundle manifest (no {', '.join(missing)})")
    return manifest


class NotABundle(EvidenceError):
    """A path given as a bundle is not one (no folder, no manifest, not a manifest)."""
