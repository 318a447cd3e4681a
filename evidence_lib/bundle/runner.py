"""`make evidence`: run the scenario notebooks with papermill and write the dated bundle.

Every parameter name is checked against the notebooks first (`papermill.inspect_notebook`):
a name no selected notebook declares is an error. Each notebook then runs on its own kernel
(`dirty-runs-evidence`) with a per-cell timeout, is exported to HTML twice (a `--no-input`
report and a full one), and its JSON sidecar gives its gates. A failed gate, a cell error or a
cell timeout makes the exit code non-zero, after the whole bundle is written. Nothing is
retried.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat

from evidence_lib import KERNEL_NAME, MIGRATIONS_DIR, OUTPUTS_DIR, PROJECT_ROOT
from evidence_lib.bundle.result import DuplicateGate, Gate
from evidence_lib.bundle.writer import (
    NotebookRun,
    banner_markdown,
    package_versions,
    write_index,
    write_manifest,
    write_zip,
)
from evidence_lib.errors import EvidenceError
from evidence_lib.pg import db, migrate, schema_sync
from evidence_lib.pg.control import ENV as control_env

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
}
RUNNER_PARAMETERS = {"database_url", "bundle_dir"}


class ParameterError(EvidenceError):
    """A parameter that no selected notebook declares, or a malformed -p argument."""


def git_revision() -> tuple[str, bool]:
    """The HEAD revision and whether the working tree is dirty (outputs/ is ignored)."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, check=True, capture_output=True, text=True
        ).stdout.strip()
        dirty = bool(
            subprocess.run(
                ["git", "status", "--porcelain"], cwd=PROJECT_ROOT, check=True, capture_output=True, text=True
            ).stdout.strip()
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown", True
    return rev, dirty


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
    if not names or names == "all":
        return dict(SCENARIOS)
    chosen = {}
    for name in (n.strip() for n in names.split(",") if n.strip()):
        if name not in SCENARIOS:
            raise ParameterError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
        chosen[name] = SCENARIOS[name]
    return chosen


def declared_parameters(stem: str) -> dict[str, Any]:
    import papermill

    declared: dict[str, Any] = papermill.inspect_notebook(str(NOTEBOOKS_DIR / f"{stem}.ipynb"))
    return declared


def route_parameters(selected: dict[str, str], params: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The parameters each notebook gets; an unknown name is an error, not a warning."""
    declared = {stem: declared_parameters(stem) for stem in selected.values()}
    for name in params:
        if name in RUNNER_PARAMETERS:
            raise ParameterError(f"parameter {name!r} is set by the runner (use --database-url / --out)")
        if not any(name in d for d in declared.values()):
            known = sorted({n for d in declared.values() for n in d} - RUNNER_PARAMETERS)
            raise ParameterError(f"no selected notebook has a parameter {name!r}; known: {', '.join(known)}")
    return {stem: {k: v for k, v in params.items() if k in declared[stem]} for stem in selected.values()}


def _execute(
    stem: str, output: Path, parameters: dict[str, Any], bundle: Path, cell_timeout: float, run: NotebookRun
) -> None:
    import papermill
    from nbclient.exceptions import CellTimeoutError

    log_path = bundle / "logs" / f"{stem}.log"
    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    pm_logger = logging.getLogger("papermill")
    pm_logger.addHandler(handler)
    pm_logger.setLevel(logging.INFO)
    interactive = sys.stdout.isatty()
    started = time.perf_counter()
    try:
        papermill.execute_notebook(
            str(NOTEBOOKS_DIR / f"{stem}.ipynb"),
            str(output),
            parameters=parameters,
            kernel_name=KERNEL_NAME,
            progress_bar=interactive,
            log_output=not interactive,
            execution_timeout=cell_timeout,
            cwd=str(NOTEBOOKS_DIR),
            request_save_on_cell_execute=True,
        )
        run.status = "ok"
    except papermill.PapermillExecutionError as exc:
        run.status, run.error = "cell_error", f"{exc.ename}: {exc.evalue}"
    except CellTimeoutError as exc:
        run.status, run.error = "timeout", f"a cell ran longer than {cell_timeout:.0f} s: {str(exc)[:200]}"
    except Exception as exc:  # the kernel died, the notebook could not be read, ...
        run.status, run.error = "runner_error", f"{type(exc).__name__}: {exc}"
    finally:
        run.seconds = time.perf_counter() - started
        pm_logger.removeHandler(handler)
        handler.close()


def _finish_notebook(stem: str, output: Path, manifest: dict[str, Any], run: NotebookRun, bundle: Path) -> None:
    from nbconvert import HTMLExporter

    if not output.exists():
        return
    nb = nbformat.read(output, as_version=4)
    for i, cell in enumerate(nb.cells):
        if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            cell["id"] = "injected-parameters"  # papermill's random id would make HTML differ run to run
        meta = cell.get("metadata", {}).get("papermill", {})
        if meta.get("duration") is not None:
            run.cells.append(
                {
                    "cell": i,
                    "seconds": round(float(meta["duration"]), 3),
                    "description": cell.source.splitlines()[0][:80] if cell.source else "",
                }
            )
    banner = banner_markdown(manifest)
    if banner:
        nb.cells.insert(0, nbformat.v4.new_markdown_cell(banner, id="not-candidate-stamp"))
    nbformat.write(nb, output)
    (bundle / "html").mkdir(exist_ok=True)
    for suffix, exclude in ((".html", True), (".full.html", False)):
        exporter = HTMLExporter(exclude_input=exclude, exclude_input_prompt=exclude, exclude_output_prompt=exclude)
        body, _ = exporter.from_notebook_node(nb)
        (bundle / "html" / f"{run.scenario}{suffix}").write_text(body)


def run_evidence(
    scenarios: str = "",
    params: dict[str, Any] | None = None,
    *,
    database_url: str | None = None,
    out: Path | None = None,
    cell_timeout: float = 600.0,
) -> int:
    """Run the selected notebooks into a new bundle; returns the exit code (0 only if all green)."""
    params = params or {}
    selected = select(scenarios)
    routed = route_parameters(selected, params)
    rev, dirty = git_revision()
    started = dt.datetime.now(dt.UTC)
    bundle = out or OUTPUTS_DIR / f"{started.strftime('%Y%m%dT%H%M%SZ')}-{rev[:12]}"
    for sub in ("html", "tables", "charts", "logs", "sidecars"):
        (bundle / sub).mkdir(parents=True, exist_ok=True)
    artifact = migrate.candidate_artifact(MIGRATIONS_DIR)
    print(f"evidence: bundle {bundle}")
    runs: list[NotebookRun] = []
    with db.open_server(database_url) as server:
        with server.admin() as conn:
            row = conn.execute("select current_setting('server_version'), current_setting('fsync')").fetchone()
        sync = schema_sync.check_schema_sync(server)
        print(f"evidence: PostgreSQL {row[0] if row else '?'} ({server.kind}); {sync.summary().splitlines()[0]}")
        reasons = (
            (["dirty working tree"] if dirty else [])
            + ([] if sync.in_sync else ["migration artifact out of sync with sql/"])
            + ([f"test hooks armed ({params['hooks']})"] if params.get("hooks") else [])
        )
        manifest: dict[str, Any] = {
            "revision": rev,
            "dirty": dirty,
            "candidate": not reasons,
            "not_candidate_reasons": reasons,
            "migration_artifact": {
                "path": str(artifact.path.relative_to(PROJECT_ROOT)),
                "sha256": artifact.sha256,
            },
            "schema_sync": {"in_sync": sync.in_sync, "catalog_lines": sync.objects, "diff": sync.diff},
            "server": {
                "kind": server.kind,
                "postgresql": row[0] if row else None,
                "fsync": row[1] if row else None,
                "pgmq": _pgmq_version(),
            },
            "packages": package_versions(),
            "parameters": params,
            "cell_timeout_seconds": cell_timeout,
            "started_at": started.isoformat(),
            "kernel": KERNEL_NAME,
        }
        if server.control is not None:  # the notebooks may crash and restart the server this run owns
            os.environ[control_env] = server.control.to_env()
        for stem in selected.values():
            run = NotebookRun(
                scenario=stem,
                notebook=f"{stem}.ipynb",
                parameters={**routed[stem], "bundle_dir": str(bundle)},
            )
            output = bundle / f"{stem}.ipynb"
            print(f"evidence: {stem} ...", flush=True)
            _execute(
                stem,
                output,
                {**routed[stem], "database_url": server.maintenance_url, "bundle_dir": str(bundle.resolve())},
                bundle,
                cell_timeout,
                run,
            )
            sidecar = bundle / "sidecars" / f"{stem}.json"
            if sidecar.exists():
                saved = json.loads(sidecar.read_text())
                run.gates, run.headline = saved["gates"], saved.get("headline", "")
            _finish_notebook(stem, output, manifest, run, bundle)
            runs.append(run)
            red = [g["name"] for g in run.gates if not g["passed"]]
            print(
                f"evidence: {stem}: {'PASS' if run.passed else 'FAIL'} ({run.status}, "
                f"{len(run.gates) - len(red)}/{len(run.gates)} gates green, {run.seconds:.1f} s)"
                + (f" red: {', '.join(red)}" if red else "")
                + (f" error: {run.error}" if run.error else ""),
                flush=True,
            )
    os.environ.pop(control_env, None)
    manifest["finished_at"] = dt.datetime.now(dt.UTC).isoformat()
    manifest["passed"] = bool(runs) and all(r.passed for r in runs)
    manifest["notebooks"] = [r.__dict__ | {"passed": r.passed} for r in runs]
    manifest["gates"] = gate_map(runs)
    manifest["exit_code"] = 0 if manifest["passed"] else 1
    write_manifest(bundle, manifest)
    write_index(bundle, manifest, runs)
    write_zip(bundle)
    verdict = "PASS" if manifest["passed"] else "FAIL"
    stamp = "" if manifest["candidate"] else f"  [not candidate evidence: {'; '.join(reasons)}]"
    print(f"evidence: {verdict}{stamp}\nevidence: open {bundle / 'index.html'}")
    return int(manifest["exit_code"])


def gate_map(runs: list[NotebookRun]) -> dict[str, str]:
    """Every gate of every notebook under its unique key; a duplicate key is an error (a second
    verdict under one key would hide the first, as a red gate at one worker count once was)."""
    out: dict[str, str] = {}
    for r in runs:
        for g in r.gates:
            key = Gate(g["name"], g["passed"], mode=g.get("mode", ""), point=g.get("point", "")).key(r.scenario)
            if key in out:
                raise DuplicateGate(f"gate {key} appears twice in the bundle")
            out[key] = "PASS" if g["passed"] else "FAIL"
    return out


def _pgmq_version() -> str:
    import pgmq

    return str(pgmq.get_embedded_sql_version())
