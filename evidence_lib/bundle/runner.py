"""`make evidence` / `make matrix`: run the scenario notebooks with papermill, write the bundle.

Every parameter name is checked against the notebooks first (`bundle.params`). The server is
started (or reached) before anything is written, so an unreachable server leaves no bundle.
Each notebook runs on its own kernel with a per-cell timeout while the runner prints what it
reports (`bundle.progress`); it is then exported to HTML with the bundle header. A failed gate,
a cell error or a cell timeout makes the exit code non-zero, after the whole bundle is written.
Ctrl-C writes the bundle with what ran, marked interrupted (exit 130). Nothing is retried.

A matrix run (`versions`) runs the notebooks once per PostgreSQL major version into `pg<N>/`
folders of one bundle; every table carries a `postgresql` column and every gate key the version.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence_lib import KERNEL_NAME, MIGRATIONS_DIR, OUTPUTS_DIR, PROJECT_ROOT, progress
from evidence_lib.bundle import manifest as facts
from evidence_lib.bundle import schedule
from evidence_lib.bundle.notebooks import cell_timeout as cell_timeout_of
from evidence_lib.bundle.notebooks import execute, finish, interrupt_kernels
from evidence_lib.bundle.params import (
    MATRIX_SCENARIOS,
    NOTEBOOKS_DIR,
    SCENARIOS,
    ParameterError,
    parse_parameters,
    route_parameters,
    select,
)
from evidence_lib.bundle.progress import Clock, Say, Watcher
from evidence_lib.bundle.runs import NotebookRun
from evidence_lib.bundle.shards import Shard, share
from evidence_lib.bundle.writer import finish_bundle
from evidence_lib.errors import BadInput
from evidence_lib.mutation.coverage import COVERAGE_ENV
from evidence_lib.pg import db, migrate, schema_sync, servers
from evidence_lib.pg.control import ENV as CONTROL_ENV
from evidence_lib.pg.db import ServerUnavailable
from evidence_lib.results.gate import DuplicateGate, Gate

__all__ = ["NOTEBOOKS_DIR", "SCENARIOS", "ParameterError", "gate_map", "parse_parameters", "run_evidence"]
EXIT_NOT_PINNED = 3  # the migration artifact does not reproduce sql/: evidence of no pinned artifact
RUNTIME_ENV = "JUPYTER_RUNTIME_DIR"  # where kernels put their connection files


@dataclass
class Plan:
    selected: dict[str, str]  # scenario name -> notebook stem
    overrides: dict[str, Any]
    routed: dict[str, dict[str, Any]]
    declared: dict[str, dict[str, Any]]
    cell_timeouts: dict[str, float]  # notebook stem -> seconds one cell may run (notebooks.cell_timeout)
    matrix: bool
    jobs: int = 1  # scenarios at once (bundle.schedule)


def run_evidence(
    scenarios: str = "",
    params: dict[str, Any] | None = None,
    *,
    database_url: str | None = None,
    out: Path | None = None,
    cell_timeout: float | None = None,
    versions: list[str] | None = None,
    jobs: int = 1,
    shard: Shard | None = None,
) -> int:
    """Run the selected notebooks into a new bundle; returns the exit code (0 only if all green,
    130 when interrupted). `versions` (PostgreSQL majors) makes it a matrix run; `jobs` runs
    that many scenarios at once (`bundle.schedule`); `shard` runs only its share of the selected
    scenarios (`bundle.shards`), the whole plan named in the manifest for the merge."""
    planned = select(scenarios)
    selected = {n: planned[n] for n in share(list(planned), shard)} if shard else planned
    schedule.phases(list(selected), jobs)  # --jobs 0 is refused before anything runs
    routed, declared = route_parameters(planned, params or {})  # every shard checks the parameters of the plan
    routed = {stem: v for stem, v in routed.items() if stem in selected.values()}
    declared = {stem: v for stem, v in declared.items() if stem in selected.values()}
    timeouts = {stem: cell_timeout_of(stem, cell_timeout) for stem in selected.values()}  # resolved once
    plan = Plan(selected, dict(params or {}), routed, declared, timeouts, matrix=bool(versions), jobs=jobs)
    say = Say(Clock())
    runs: list[NotebookRun] = []
    bundle: Path | None = None
    manifest: dict[str, Any] = {}
    interrupted = False
    runtime = _runtime_dir()
    saved = {k: os.environ.get(k) for k in (RUNTIME_ENV, progress.ENV, CONTROL_ENV, servers.ORIGIN_ENV, servers.PG_ENV,
                                            COVERAGE_ENV)}  # fmt: skip
    os.environ[RUNTIME_ENV] = str(runtime)
    os.environ.pop(COVERAGE_ENV, None)
    try:
        plan_versions: list[str | None] = list(versions) if versions else [None]
        for pg in plan_versions:
            asked = pg or os.environ.get(servers.PG_ENV) or servers.EMBEDDED_MAJOR
            say(f"starting PostgreSQL {asked} ..." if not database_url and not os.environ.get("DATABASE_URL")
                else "connecting to the server ...")  # fmt: skip
            if bundle is None:
                manifest = _manifest(plan, pg)
                if shard is not None:
                    manifest["shard"] = {"spec": str(shard), "plan": list(planned), "share": list(selected)}
                bundle = out or OUTPUTS_DIR / f"{manifest['started_at_stamp']}-{manifest['revision'][:12]}"
                bundle.mkdir(parents=True, exist_ok=True)
                say(f"bundle {bundle}")
            try:
                with servers.open_server(database_url, pg=pg) as server:
                    _on_server(server, plan, bundle, manifest, runs, say, runtime)
            except ServerUnavailable as exc:
                if not plan.matrix or isinstance(exc, BadInput):
                    if not runs and not any(bundle.iterdir()):
                        bundle.rmdir()  # nothing ran: no empty bundle left behind
                    raise
                # a major that cannot be fetched or started is named as not run, never dropped
                manifest.setdefault("not_run", []).append({"major": pg, "reason": str(exc)})
                say(f"PostgreSQL {pg}: not run: {exc}")
    except KeyboardInterrupt:
        interrupted = True
        say("interrupted: writing the bundle with what ran")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(runtime, ignore_errors=True)
    if bundle is None:  # interrupted before the server was up: nothing ran, nothing is written
        return 130
    manifest.pop("started_at_stamp", None)
    manifest["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    manifest["interrupted"] = interrupted
    nothing_to_run = shard is not None and not selected  # a share with no scenario (more shards than scenarios)
    manifest["passed"] = (not interrupted and (bool(runs) or nothing_to_run) and all(r.passed for r in runs)
                          and not manifest.get("not_run"))  # fmt: skip
    manifest["notebooks"] = [r.record() for r in runs]
    manifest["gates"] = gate_map(runs)
    manifest["exit_code"] = (
        130 if interrupted
        else EXIT_NOT_PINNED if not manifest.get("schema_sync", {}).get("in_sync", True)
        else 0 if manifest["passed"] else 1
    )  # fmt: skip
    problems = finish_bundle(bundle, manifest, runs)
    for problem in problems:
        say(f"warning: {problem}")
    verdict = "INTERRUPTED" if interrupted else "PASS" if manifest["passed"] else "FAIL"
    reasons = manifest["not_candidate_reasons"]
    stamp = "" if manifest["candidate"] else f"  [not candidate evidence: {'; '.join(reasons)}]"
    say(f"{verdict}{stamp}")
    say(f"open {bundle / 'index.html'}  (issue comment: {bundle / 'summary.md'})")
    return int(manifest["exit_code"])


def _runtime_dir() -> Path:
    """The kernels' folder (connection files, IPC sockets), removed when the run ends. A Unix
    socket path must stay under 108 bytes: a long temp folder falls back to /tmp."""
    path = Path(tempfile.mkdtemp(prefix="evidence-runtime-"))
    if len(str(path)) > 60 and Path("/tmp").is_dir():
        path.rmdir()
        path = Path(tempfile.mkdtemp(prefix="evidence-runtime-", dir="/tmp"))
    return path


def _manifest(plan: Plan, pg: str | None) -> dict[str, Any]:
    """What is known before the first notebook runs (servers are added as they start)."""
    rev, dirty_files = facts.git_state()
    started = dt.datetime.now(dt.UTC)
    artifact = migrate.candidate_artifact(MIGRATIONS_DIR)
    default = list(plan.selected) == (MATRIX_SCENARIOS if plan.matrix else list(SCENARIOS))
    return {
        "revision": rev,
        "dirty": bool(dirty_files),
        "dirty_files": dirty_files,
        "candidate": True,
        "not_candidate_reasons": [],
        "command_line": facts.command_line(),
        "reproduce": facts.reproduce_line(
            rev,
            [] if default else list(plan.selected),
            plan.overrides,
            "" if plan.matrix else (pg or os.environ.get(servers.PG_ENV, "")),
            target="matrix" if plan.matrix else "evidence",
        ),
        "scenarios": list(plan.selected),
        "matrix": plan.matrix,
        "migration_artifact": {"path": str(artifact.path.relative_to(PROJECT_ROOT)), "sha256": artifact.sha256},
        "servers": [],
        "pgmq": facts.pgmq_versions(),
        "machine": facts.machine(),
        "packages": facts.installed_packages(),
        "overrides": plan.overrides,
        "parameters": {},
        "cell_timeout_seconds": plan.cell_timeouts,
        "started_at": started.isoformat(timespec="seconds"),
        "started_at_stamp": started.strftime("%Y%m%dT%H%M%SZ"),
        "kernel": KERNEL_NAME,
    }


def _on_server(
    server: db.Server,
    plan: Plan,
    bundle: Path,
    manifest: dict[str, Any],
    runs: list[NotebookRun],
    say: Say,
    runtime: Path,
) -> None:
    """Check the schema on this server, record it, and run every selected notebook on it."""
    with server.admin() as conn:
        settings = facts.server_settings(conn)
        major = str(db.one(conn, "select current_setting('server_version_num')::int / 10000"))
    sync = schema_sync.check_schema_sync(server)
    manifest["servers"].append(
        {"major": major, "kind": server.kind, "origin": server.origin, "settings": settings, "in_sync": sync.in_sync}
    )
    manifest.setdefault("schema_sync", {"in_sync": sync.in_sync, "catalog_lines": sync.objects, "diff": sync.diff})
    if not sync.in_sync:
        manifest["schema_sync"] = {"in_sync": False, "catalog_lines": sync.objects, "diff": sync.diff}
    _stamp(manifest, plan)
    say(f"PostgreSQL {settings['server_version']} ({server.origin or server.kind}); {sync.summary().splitlines()[0]}")
    os.environ[servers.PG_ENV] = major  # the notebooks check the server they are given against it
    if server.control is not None:  # the notebooks may crash and restart the server this run owns
        os.environ[CONTROL_ENV] = server.control.to_env()
        os.environ[servers.ORIGIN_ENV] = server.origin
    folder = f"pg{major}/" if plan.matrix else ""
    where = bundle / folder if folder else bundle
    for sub in ("html", "tables", "charts", "logs", "sidecars"):
        (where / sub).mkdir(parents=True, exist_ok=True)
    if "mutation" in plan.selected and plan.routed[plan.selected["mutation"]].get("parts_oracle", True):
        # the scenarios record what each part executes, for the mutation sweep's parts oracle
        os.environ[COVERAGE_ENV] = str((where / "coverage").resolve())
    own_cluster = server.control is not None  # a crashing scenario may start a cluster of its own
    runs_by_name: dict[str, NotebookRun] = {}
    for name, stem in plan.selected.items():  # the bundle lists them in the order asked for
        run = NotebookRun(scenario=stem, notebook=f"{folder}{stem}.ipynb", pg=major, folder=folder)
        alone = own_cluster and plan.jobs > 1 and name in schedule.OWN_CLUSTER
        run.parameters = facts.parameters_used(
            plan.declared[stem],
            plan.routed[stem],
            {"database_url": "" if alone else db.redact(server.maintenance_url), "bundle_dir": folder or "."},
        )
        manifest["parameters"][run.label] = run.parameters
        runs.append(run)
        runs_by_name[name] = run
    total = len(plan.selected)

    def run_one(name: str) -> None:
        stem, run = plan.selected[name], runs_by_name[name]
        alone = own_cluster and plan.jobs > 1 and name in schedule.OWN_CLUSTER
        say(f"{run.label} ({list(plan.selected).index(name) + 1}/{total}) ..."
            + (" on a cluster of its own" if alone else ""))  # fmt: skip
        progress_file = runtime / f"{stem}{major}.progress"
        env = {progress.ENV: str(progress_file)}
        if alone:  # the notebook starts a server of the same build (EVIDENCE_PG) and may crash it
            env |= {"DATABASE_URL": "", CONTROL_ENV: "", servers.ORIGIN_ENV: ""}
        output = where / f"{stem}.ipynb"
        url = "" if alone else server.maintenance_url
        try:
            with Watcher(progress_file, run.label, say):
                execute(stem, output, {**plan.routed[stem], "database_url": url, "bundle_dir": str(where.resolve())},
                        where / "logs" / f"{stem}.log", plan.cell_timeouts[stem], run, env)  # fmt: skip
        finally:  # an interrupted notebook still gets its report, with what it got to
            _gather(where, stem, major, output, manifest, run)
        red = run.red
        say(
            f"{run.label}: {run.verdict} ({run.status}, {len(run.gates) - len(red)}/{len(run.gates)} gates green, "
            f"{run.seconds:.1f} s)" + (f" red: {', '.join(red)}" if red else "")
            + (f" error: {run.error}" if run.error else "")
        )  # fmt: skip

    started = time.monotonic()
    try:
        groups = schedule.phases(list(plan.selected), plan.jobs, shared_server=not own_cluster)
        slots = schedule.run_phases(groups, plan.jobs, run_one,
                                    on_interrupt=interrupt_kernels)  # fmt: skip
    finally:
        manifest.setdefault("schedule", []).append({"pg": major, "jobs": plan.jobs,
                                                    "wall_seconds": round(time.monotonic() - started, 1)})  # fmt: skip
    for slot in slots:
        runs_by_name[slot.name].started_at, runs_by_name[slot.name].finished_at = slot.started, slot.finished
    path = {s.name for s in schedule.critical_path(slots)}
    for name in path:
        runs_by_name[name].critical = True


def _stamp(manifest: dict[str, Any], plan: Plan) -> None:
    reasons = (
        (["dirty working tree"] if manifest["dirty"] else [])
        + ([] if manifest["schema_sync"]["in_sync"] else ["migration artifact out of sync with sql/"])
        + ([f"test hooks armed ({plan.overrides['hooks']})"] if plan.overrides.get("hooks") else [])
    )
    manifest["candidate"], manifest["not_candidate_reasons"] = not reasons, reasons


def _gather(where: Path, stem: str, major: str, output: Path, manifest: dict[str, Any], run: NotebookRun) -> None:
    """The scenario's outputs into the bundle, whatever they hold: a step that cannot read or
    render them is said in the run's error (the run is red) and the next step still runs, so a
    red bundle is never lost to what the scenario recorded."""
    steps: list[Callable[[], None]] = [
        lambda: _collect(where, stem, major, run),
        lambda: finish(output, where / "html", manifest, run),
    ]
    for step in steps:
        try:
            step()
        except Exception as exc:  # the bundle is written anyway; this run is red and says why
            problem = f"the runner could not write this scenario's outputs: {type(exc).__name__}: {str(exc)[:300]}"
            run.error = f"{run.error}; {problem}" if run.error else problem
            if run.status == "ok":
                run.status = "runner_error"


def _collect(where: Path, stem: str, major: str, run: NotebookRun) -> None:
    """The scenario's sidecar into `run`; the server's version into each of its tables."""
    sidecar = where / "sidecars" / f"{stem}.json"
    if sidecar.exists():
        saved = json.loads(sidecar.read_text())
        run.gates, run.headline = saved["gates"], saved.get("headline", "")
        run.targets_missed = list(saved.get("targets_missed") or [])
    for table in sorted((where / "tables").glob(f"{stem}__*.csv")):
        add_column(table, "postgresql", major)


def add_column(path: Path, name: str, value: str) -> None:
    """Put `name` = `value` as the first column of a CSV table (once), whatever the length of its
    fields (a counterexample may hold megabytes: the csv module's default limit is 128 KiB)."""
    import csv

    csv.field_size_limit(2**31 - 1)
    with path.open(newline="") as source:
        rows = list(csv.reader(source))
    if rows and rows[0] and rows[0][0] == name:
        return
    if not rows or not rows[0]:  # a table without columns (nothing to list): the column alone
        rows = [[]]
    with path.open("w", newline="") as sink:
        writer = csv.writer(sink)
        writer.writerow([name, *rows[0]])
        writer.writerows([value, *row] for row in rows[1:])


def gate_map(runs: list[NotebookRun]) -> dict[str, str]:
    """Every gate of every notebook under its unique key (`pg15:` first in a matrix bundle); a
    duplicate key is an error (a second verdict under one key would hide the first)."""
    out: dict[str, str] = {}
    for r in runs:
        for g in r.gates:
            key = Gate(g["name"], g["passed"], mode=g.get("mode", ""), point=g.get("point", "")).key(r.scenario)
            key = f"pg{r.pg}:{key}" if r.folder else key
            if key in out:
                raise DuplicateGate(f"gate {key} appears twice in the bundle")
            out[key] = "PASS" if g["passed"] else "FAIL"
    return out
