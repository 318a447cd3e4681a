"""The layout is a rule: imports point one way, toward the engine; no module grows past ~400 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from evidence_lib import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "evidence_lib"
# What each subpackage may import from evidence_lib (besides itself, the root and `errors`).
# `results` (gates, ScenarioResult) is a leaf every scenario fills in, the bundle shows and the
# mutation sweep judges by; `bundle` runs the scenarios.
ALLOWED: dict[str, set[str]] = {
    "results": set(),
    "pg": set(),
    "engine": {"pg.db"},
    "workers": {"engine", "pg.db"},
    "harness": {"engine", "pg"},
    "bench": {"workers", "harness", "engine", "pg"},
    "model": {"workers", "harness", "engine", "pg"},
    "mutation": {"model", "workers", "harness", "engine", "pg", "results"},
    "scenarios": {"mutation", "model", "bench", "workers", "harness", "engine", "pg", "results"},
    "bundle": {"results", "scenarios", "mutation", "model", "bench", "workers", "harness", "engine", "pg"},
}
# Outside scenarios/, only these may import evidence_lib.scenarios: the CLI (its `bench` command
# prints the performance scenario), the moderation example's validation scenario (notebook 08),
# and the tests of scenarios.
SCENARIO_IMPORTERS = {
    "evidence_lib/bundle/cli.py",
    "evidence_lib/bundle/mutation_cli.py",
    "examples/moderation/validation.py",
    "tests/test_races.py",
    "tests/test_security.py",
    "tests/test_v2_stress.py",
    "tests/test_negative_controls.py",
    "tests/test_worker_outages.py",
    "tests/test_model.py",
    "tests/test_mutation_status.py",
    "tests/test_mutation_unit_parts.py",
    "tests/test_regress.py",
}
MAX_LINES = 400


def imported_modules(path: Path) -> set[str]:
    """The evidence_lib modules `path` imports (`from evidence_lib.x import y` counts as x.y too)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("evidence_lib"):
            rest = node.module.removeprefix("evidence_lib").lstrip(".")
            out.add(rest)
            out.update(f"{rest}.{a.name}".lstrip(".") for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name.removeprefix("evidence_lib.") for a in node.names if a.name.startswith("evidence_lib."))
    return out


def layer(module: str) -> str:
    """The rule that applies to a dotted module path below evidence_lib ('' for the root)."""
    head = module.split(".")[0]
    return head if head in ALLOWED else ""


def covered(module: str, allowed: set[str]) -> bool:
    return any(module == a or module.startswith(a + ".") for a in allowed)


def source_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_module_imports_only_the_layers_below_it(path: Path) -> None:
    own = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
    rule = layer(own)
    if rule == "":
        return  # the root modules: paths, errors, __main__
    allowed = ALLOWED[rule] | {rule}
    wrong = sorted(m for m in imported_modules(path) if layer(m) not in ("", rule) and not covered(m, allowed))
    assert wrong == [], f"{own} may import {sorted(allowed)}, not {wrong}"


def test_nothing_but_the_runner_and_tests_of_scenarios_imports_scenarios() -> None:
    importers = {
        str(p.relative_to(PROJECT_ROOT))
        for folder in ("evidence_lib", "examples", "tests")
        for p in (PROJECT_ROOT / folder).rglob("*.py")
        if "__pycache__" not in p.parts
        and not p.is_relative_to(PACKAGE / "scenarios")
        and any(m.startswith("scenarios") for m in imported_modules(p))
    }
    assert importers <= SCENARIO_IMPORTERS


@pytest.mark.parametrize("folder", ["evidence_lib", "examples", "tests"])
def test_no_python_module_is_longer_than_400_lines(folder: str) -> None:
    long = {
        str(p.relative_to(PROJECT_ROOT)): n
        for p in (PROJECT_ROOT / folder).rglob("*.py")
        if "__pycache__" not in p.parts and (n := len(p.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


def test_every_subpackage_is_described_in_the_readme_architecture() -> None:
    readme = (PROJECT_ROOT / "README.md").read_text()
    section = readme.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert {p for p in packages if f"`evidence_lib/{p}/`" not in section} == set()
