"""What a bundle records so that a run can be reproduced and judged: the command, every parameter
with the value actually used, the revision and dirty files, the machine, the server and its
settings, the PGMQ SQL version and every installed Python package."""

from __future__ import annotations

import ast
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from evidence_lib import PROJECT_ROOT
from evidence_lib.pg.db import Conn

# The settings that change what a timing or a durability claim means.
SERVER_SETTINGS = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "shared_buffers",
    "wal_level",
    "max_connections",
    "work_mem",
)


def git_state() -> tuple[str, list[str]]:
    """HEAD and the dirty files (`git status --porcelain` lines; outputs/ is ignored)."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, check=True, capture_output=True, text=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain"], cwd=PROJECT_ROOT, check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown", ["(not a git checkout: the revision is unknown)"]
    return rev, [line for line in status.splitlines() if line.strip()]


def command_line() -> str:
    """The command exactly as this process was started (interpreter, -m, arguments)."""
    return shlex.join(getattr(sys, "orig_argv", [sys.executable, *sys.argv]))


def machine() -> dict[str, Any]:
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": _os_name(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "hostname": platform.node(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def server_settings(conn: Conn) -> dict[str, str]:
    """The server's version and the settings in SERVER_SETTINGS, as the server reports them."""
    out: dict[str, str] = {}
    for name in SERVER_SETTINGS:
        row = conn.execute("select current_setting(%s, true)", (name,)).fetchone()
        out[name] = str(row[0]) if row and row[0] is not None else "unknown"
    return out


def installed_packages() -> dict[str, str]:
    """Every installed distribution in this environment, name -> version, sorted by name."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[str(name).lower()] = dist.version
    return dict(sorted(found.items()))


def pgmq_versions() -> dict[str, str]:
    """The PGMQ SQL that scenarios install and the wheel that ships it."""
    import pgmq

    return {"sql": str(pgmq.get_embedded_sql_version()), "wheel": metadata.version("pgmq")}


def parameters_used(declared: dict[str, Any], overrides: dict[str, Any], runner: dict[str, Any]) -> dict[str, Any]:
    """Every parameter of one notebook with the value it ran with: the override when given, the
    runner's value for the runner's parameters, else the notebook's default (from
    `papermill.inspect_notebook`, whose defaults are Python source text)."""
    out: dict[str, Any] = {}
    for name, info in declared.items():
        if name in runner:
            out[name] = runner[name]
        elif name in overrides:
            out[name] = overrides[name]
        else:
            out[name] = _literal(str(info.get("default", "")))
    return out


def _literal(source: str) -> Any:
    try:
        return ast.literal_eval(source)
    except (ValueError, SyntaxError):
        return source


def reproduce_line(
    revision: str, scenarios: list[str], overrides: dict[str, Any], pg: str, *, target: str = "evidence"
) -> str:
    """A command that runs the same scenarios with the same parameters at the same revision
    (`scenarios` empty: the target's default selection)."""
    parts = [f"git checkout {revision[:12]} &&", f"make {target}"]
    if pg:
        parts.append(f"PG={pg}")
    if scenarios:
        parts.append(f"SCENARIOS={','.join(scenarios)}")
    if overrides:
        rendered = " ".join(f"{k}={_text(v)}" for k, v in sorted(overrides.items()))
        parts.append(f"PARAMS={shlex.quote(rendered)}")
    return " ".join(parts)


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
