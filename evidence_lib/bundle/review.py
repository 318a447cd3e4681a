"""A bundle's pages as a reviewer sees them: every page (index.html and each report) opened in
headless Chromium (Debian's `chromium`, driven through Playwright's Python API with the system
executable, never a downloaded browser) at 1280 x 800, checked, and photographed into the
bundle's `review/` folder; `report.pdf` printed by the same browser.

What a page must be (each check names the defect that turns it red, and a test plants each one):
- `overflow`: nothing wider than the window (the page scrolls down, never right);
- `verdict`: exactly one verdict heading, above the fold;
- `offline`: no request leaves `file://` (a report is proof that opens offline, years later);
- `pandas_index`: no table shows pandas' index column;
- `rounding`: no number in a table or text printed with more than three decimals;
- `timestamps`: no time of day with fractions of a second;
- `axe`: axe-core (`axe-playwright-python`, offline) finds no serious or critical violation.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence_lib.errors import BadInput, EvidenceError

WIDTH, HEIGHT = 1280, 800
CHROMIUM = os.environ.get("EVIDENCE_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]  # fmt: skip
SERIOUS = ("serious", "critical")
LONG_DECIMAL = re.compile(r"(?<![\w.:])-?\d[\d,]*\.\d{4,}(?![\w.])")
SUB_SECOND = re.compile(r"(?<!\d)\d{2}:\d{2}:\d{2}[.,]\d+")
CHECKS = ("overflow", "verdict", "offline", "pandas_index", "rounding", "timestamps", "axe")

# the page's visible text outside code, and what the checks read from the page itself
PROBE = """() => {
  const skip = el => el.closest('pre, code, script, style, .jp-InputArea, .input_area');
  const texts = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    if (node.parentElement && !skip(node.parentElement) && node.textContent.trim()) texts.push(node.textContent);
  }
  const verdicts = [...document.querySelectorAll('h1, h2, h3, [data-verdict]')]
    .filter(el => el.hasAttribute('data-verdict') || /^\\s*verdict\\b/i.test(el.textContent))
    .map(el => ({text: el.textContent.trim().slice(0, 120), top: el.getBoundingClientRect().top + window.scrollY}));
  const indexCells = document.querySelectorAll(
    'table.dataframe tbody th, table[id^="T_"] th.row_heading, table[id^="T_"] th.blank').length;
  return {width: document.documentElement.scrollWidth, texts, verdicts, indexCells};
}"""


class BrowserMissing(EvidenceError):
    """No Chromium (or no Playwright) here: the pages cannot be checked."""


class NotABundle(BadInput):
    """The folder given to the review holds no index.html and manifest.json."""


@dataclass
class PageReview:
    page: str
    problems: dict[str, list[str]] = field(default_factory=dict)
    screenshot: str = ""

    @property
    def passed(self) -> bool:
        return not self.problems

    def add(self, check: str, problem: str) -> None:
        self.problems.setdefault(check, []).append(problem)


def browser_missing() -> str:
    """Why the browser check cannot run here ("" when it can)."""
    try:
        import axe_playwright_python  # type: ignore[import-untyped]  # noqa: F401
        import playwright  # noqa: F401
    except ImportError:
        return "Playwright or axe-playwright-python is not installed: run `make setup`"
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        return f"no Chromium at {CHROMIUM}: `sudo apt-get install chromium` (Debian), or set EVIDENCE_CHROMIUM"
    return ""


@contextmanager
def browser() -> Iterator[Any]:
    """A headless Chromium page factory (Debian's binary), closed on exit."""
    missing = browser_missing()
    if missing:
        raise BrowserMissing(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            chromium.close()


def pages(bundle: Path) -> list[Path]:
    """index.html and every report (the reports with code included are the same pages, longer)."""
    if not (bundle / "index.html").exists() or not (bundle / "manifest.json").exists():
        raise NotABundle(f"{bundle} is not a bundle (no index.html and manifest.json in it)")
    reports = sorted(p for p in bundle.rglob("html/*.html") if not p.name.endswith(".full.html"))
    return [bundle / "index.html", *reports]


def review_page(chromium: Any, path: Path, shots: Path | None, name: str = "") -> PageReview:
    from axe_playwright_python.sync_playwright import Axe  # type: ignore[import-untyped]

    review = PageReview(page=name or path.name)
    context = chromium.new_context(viewport={"width": WIDTH, "height": HEIGHT})
    page = context.new_page()
    left: list[str] = []

    def guard(route: Any) -> None:
        if route.request.url.startswith(("file://", "data:", "blob:", "about:")):
            route.continue_()
        else:
            left.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    try:
        page.goto(path.resolve().as_uri(), wait_until="load")
        facts = page.evaluate(PROBE)
        if facts["width"] > WIDTH:
            review.add("overflow", f"{facts['width']} px wide in a {WIDTH} px window")
        verdicts = facts["verdicts"]
        if len(verdicts) != 1:
            review.add("verdict", f"{len(verdicts)} verdict headings: {[v['text'][:60] for v in verdicts]}")
        elif verdicts[0]["top"] > HEIGHT:
            review.add("verdict", f"the verdict is {verdicts[0]['top']:.0f} px down, below the fold ({HEIGHT} px)")
        review.problems.update({"offline": sorted(set(left))[:5]} if left else {})
        if facts["indexCells"]:
            review.add("pandas_index", f"{facts['indexCells']} index cells of a pandas table")
        text = "\n".join(facts["texts"])
        for found in sorted(set(LONG_DECIMAL.findall(text)))[:5]:
            review.add("rounding", f"{found} is not rounded")
        for found in sorted(set(SUB_SECOND.findall(text)))[:5]:
            review.add("timestamps", f"{found} has fractions of a second")
        violations = Axe().run(page).response["violations"]
        for v in violations:
            if v.get("impact") in SERIOUS:
                review.add("axe", f"{v['id']} ({v['impact']}): {v.get('help', '')}")
        if shots is not None:
            shots.mkdir(parents=True, exist_ok=True)
            shot = shots / f"{review.page.removesuffix('.html').replace('/', '-')}.png"
            page.screenshot(path=str(shot), full_page=False)
            review.screenshot = shot.name
    finally:
        context.close()
    return review


def review_bundle(bundle: Path) -> list[PageReview]:
    """Check every page of `bundle`, screenshots into `bundle/review/`, the verdicts into
    `review/review.json`."""
    chosen = pages(bundle)
    shots = bundle / "review"
    with browser() as chromium:
        reviews = [review_page(chromium, p, shots, str(p.relative_to(bundle))) for p in chosen]
    verdicts = [
        {"page": r.page, "passed": r.passed, "problems": r.problems, "screenshot": r.screenshot} for r in reviews
    ]
    (shots / "review.json").write_text(json.dumps(verdicts, indent=2))
    return reviews


def print_pdf(bundle: Path) -> Path:
    """`report.pdf`: the index (verdict first, red gates open, green groups collapsed) as the
    same Chromium prints it."""
    target = bundle / "report.pdf"
    with browser() as chromium:
        page = chromium.new_page(viewport={"width": WIDTH, "height": HEIGHT})
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith(("file://", "data:")) else r.abort())
        page.goto((bundle / "index.html").resolve().as_uri(), wait_until="load")
        page.pdf(path=str(target), format="A4", print_background=True, scale=0.7,
                 margin={"top": "12mm", "bottom": "12mm", "left": "10mm", "right": "10mm"})  # fmt: skip
        page.close()
    return target
