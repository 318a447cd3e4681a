"""The browser check of a bundle's pages (bundle/review) in Debian's headless Chromium: a clean
page passes, a page planted with each defect it looks for fails on that check, a real bundle
passes on every page and gets report.pdf with the verdict on its first page. Skipped, with the
reason, where no Chromium is installed; never skipped in CI (`.ci/run` installs it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evidence_lib.bundle import review
from evidence_lib.bundle.cli import main
from evidence_lib.bundle.runner import run_evidence
from evidence_lib.results.scenario import ScenarioResult

MISSING = review.browser_missing()
if MISSING and os.environ.get("CI"):
    raise RuntimeError(f"CI must check the reports in a browser: {MISSING}")
pytestmark = pytest.mark.skipif(bool(MISSING), reason=f"no browser check here: {MISSING}")

CLEAN = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>clean</title></head><body>
<main><h1>Report</h1><p>Verdict: <span data-verdict>PASS</span></p>
<table class="dataframe"><thead><tr><th>workers</th><th>runs/s</th></tr></thead>
<tbody><tr><td>4</td><td>143.54</td></tr></tbody></table>
<p>started 2026-12-04T18:53:03+00:00</p>{extra}</main></body></html>"""

PLANTED = {
    "overflow": '<div style="width:1600px">a table that runs off the right edge</div>',
    "verdict": "<h2>Verdict: PASS</h2>",
    "offline": '<img alt="logo" src="https://example.invalid/logo.png">',
    "pandas_index": '<table class="dataframe"><thead><tr><th></th><th>a</th></tr></thead>'
    "<tbody><tr><th>0</th><td>1</td></tr></tbody></table>",
    "rounding": "<p>143.537513 runs/s</p>",
    "timestamps": "<p>finished 2026-12-04T18:53:03.828859+00:00</p>",
    "axe": '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">',  # an image without alt text
}


def _page(tmp_path: Path, name: str, extra: str) -> Path:
    path = tmp_path / f"{name}.html"
    path.write_text(CLEAN.format(extra=extra))
    return path


def test_a_clean_page_passes_and_each_planted_defect_fails_its_check(tmp_path: Path) -> None:
    assert set(PLANTED) == set(review.CHECKS)
    with review.browser() as chromium:
        clean = review.review_page(chromium, _page(tmp_path, "clean", ""), tmp_path / "shots")
        assert clean.passed, clean.problems
        assert (tmp_path / "shots" / "clean.png").exists()
        for check, defect in PLANTED.items():
            found = review.review_page(chromium, _page(tmp_path, check, defect), None)
            assert check in found.problems, f"{check} was not caught: {found.problems}"
            assert set(found.problems) == {check}, f"{check} planted, {set(found.problems)} reported"


def test_a_real_bundle_passes_on_every_page_and_gets_a_pdf(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    assert run_evidence("ab_proof", {}, out=bundle) == 0
    reviews = review.review_bundle(bundle)  # the runner did it too; this reads the verdicts directly
    assert len(reviews) >= 2
    assert [(r.page, r.problems) for r in reviews if not r.passed] == []
    assert sorted(p.name for p in (bundle / "review").glob("*.png")) == sorted(
        f"{r.page.removesuffix('.html').replace('/', '-')}.png" for r in reviews
    )
    pdf = bundle / "report.pdf"
    assert pdf.read_bytes().startswith(b"%PDF")
    from pypdf import PdfReader

    first = PdfReader(str(pdf)).pages[0].extract_text()
    assert "verdict" in first and "PASS" in first, first[:500]


def test_the_review_command_refuses_a_folder_that_is_not_a_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["review", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a bundle" in err


def test_a_table_the_scenario_never_recorded_is_shown_as_a_note_not_an_error() -> None:
    """A scenario that stopped early (every gate red) still renders every later cell of its report."""
    result = ScenarioResult("00_demo", "demo", {})
    html = result.show("rows_after_every_step").to_html()
    assert "no table rows_after_every_step" in html and "<th" in html
