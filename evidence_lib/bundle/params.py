"""Which notebooks run and with which parameters: scenario names, `-p name=value` pairs, and
their routing to the notebooks that declare them (an unknown name is an error, not a warning)."""

from __future__ import annotations

import json
from typing import Any

from evidence_lib import PROJECT_ROOT
from evidence_lib.errors import EvidenceError

NOTEBOOKS_DIR = PROJECT_ROOT / "notebooks"
SCENARIOS: dict[str, str] = {
    "ab_proof": "01_ab_proof",
    "response_loss": "02_response_loss",
    "races": "03_races",
    "reconciliation": "04_reconciliation",
    "queue_identity": "05_queue_identity",
    "admission": "06_admission",
    "performance": "07_performance",
    "validation": "08_moderation_validation",
    "security": "09_security",
    "negative_controls": "10_negative_controls",
    "model_check": "11_model_check",
    "mutation": "12_mutation",
}
# `make matrix`: the correctness scenarios (performance compares machines' timings, not servers)
MATRIX_SCENARIOS = [name for name in SCENARIOS if name != "performance"]
RUNNER_PARAMETERS = {"database_url", "bundle_dir"}


class ParameterError(EvidenceError):
    """A parameter that no selected notebook declares, or a malformed -p argument."""


def parse_parameters(pairs: list[str]) -> dict[str, Any]:
    """`name=value` pairs; values are JSON when they parse as JSON (numbers, true), else text."""
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name.strip():
            raise ParameterError(f"parameter {pair!r} is not name=value")
        try:
            out[name.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            out[name.strip()] = raw
    return out


def select(names: str) -> dict[str, str]:
    """Scenario name -> notebook stem, in the order given; "" or "all" is every scenario."""
    if not names or names == "all":
        return dict(SCENARIOS)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    for name in wanted:
        if name not in SCENARIOS:
            raise ParameterError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    return {name: SCENARIOS[name] for name in wanted}


def declared_parameters(stem: str) -> dict[str, Any]:
    """The notebook's parameters as papermill reads them (name -> default source text, type, help)."""
    import papermill

    declared: dict[str, Any] = papermill.inspect_notebook(str(NOTEBOOKS_DIR / f"{stem}.ipynb"))
    return declared


def route_parameters(
    selected: dict[str, str], params: dict[str, Any]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(the overrides each notebook gets, what each notebook declares); an unknown name raises."""
    declared = {stem: declared_parameters(stem) for stem in selected.values()}
    for name in params:
        if name in RUNNER_PARAMETERS:
            raise ParameterError(f"parameter {name!r} is set by the runner (use --database-url / --out)")
        if not any(name in d for d in declared.values()):
            known = sorted({n for d in declared.values() for n in d} - RUNNER_PARAMETERS)
            raise ParameterError(f"no selected notebook has a parameter {name!r}; known: {', '.join(known)}")
    routed = {stem: {k: v for k, v in params.items() if k in declared[stem]} for stem in selected.values()}
    return routed, declared
