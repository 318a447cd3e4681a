"""Executing one scenario notebook and turning it into the bundle's reports.

`execute` runs the notebook on our kernel over IPC (no TCP socket, so no unencrypted-transport
warning) with a per-cell timeout; the kernel's connection file lives in the runner's own
runtime folder, removed when the run ends however it ends. `finish` makes the executed notebook
re-runnable (the throwaway server's URL and the bundle path are cleared: re-running starts a
fresh server and writes nowhere), puts the bundle header on top, and exports two HTML reports
with a template that fetches nothing from the network.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import nbformat

from evidence_lib import KERNEL_NAME, PROJECT_ROOT
from evidence_lib.bundle.runs import NotebookRun, header_html

NOTEBOOKS_DIR = PROJECT_ROOT / "notebooks"
TEMPLATES = Path(__file__).resolve().parent / "templates"
CLEARED = {
    "database_url": '""  # cleared by the runner: re-running starts a fresh throwaway server',
    "bundle_dir": '""  # cleared by the runner: re-running writes nowhere (set a folder to save)',
}
_ASSIGNMENT = re.compile(r"^(\w+)\s*=")


DEFAULT_CELL_TIMEOUT = 600.0  # seconds one cell may run, unless its notebook declares its own budget


def cell_timeout(stem: str, given: float | None) -> float:
    """The seconds one cell of notebook `stem` may run: `given` (the caller's --cell-timeout),
    else the budget the notebook declares in its metadata (`evidence.cell_timeout_seconds`, with
    its reason beside it: a cell that loops over steps each bounded by its own deadline), else
    DEFAULT_CELL_TIMEOUT. The timeout is a liveness backstop, never a measurement: a slow machine
    must not turn a bundle red."""
    if given is not None:
        return given
    metadata = nbformat.read(NOTEBOOKS_DIR / f"{stem}.ipynb", as_version=4).metadata
    declared = metadata.get("evidence", {}).get("cell_timeout_seconds")
    return float(declared) if declared is not None else DEFAULT_CELL_TIMEOUT


def _kernel_manager(env: dict[str, str], started: list[int]) -> type:
    """A kernel manager whose kernel gets `env` on top of this process's environment (an empty
    value removes the variable): scenarios running side by side each get their own."""
    from jupyter_client.manager import AsyncKernelManager

    class ScenarioKernelManager(AsyncKernelManager):
        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw: Any) -> None:
            merged = {**(kw.get("env") or os.environ), **env}
            kw["env"] = {k: v for k, v in merged.items() if v != ""}
            await super()._async_launch_kernel(kernel_cmd, **kw)
            process = getattr(self.provisioner, "process", None)
            if process is not None:
                started.append(process.pid)
                with _KERNELS_LOCK:
                    _KERNELS.add(process.pid)

    return ScenarioKernelManager


_KERNELS: set[int] = set()  # the kernels started here, for interrupt_kernels
_KERNELS_LOCK = threading.Lock()
INTERRUPT_GRACE = 20.0  # seconds for an interrupted kernel to stop before it is killed


def interrupt_kernels() -> None:
    """Ctrl-C for scenarios running side by side: the signal reached only the runner's main
    thread, so every kernel gets SIGINT (its cell stops with KeyboardInterrupt: the notebook is
    marked interrupted); a kernel still alive after the grace period is killed."""
    with _KERNELS_LOCK:
        pids = set(_KERNELS)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGINT)
    deadline = time.monotonic() + INTERRUPT_GRACE
    while pids and time.monotonic() < deadline:
        pids = {pid for pid in pids if _alive(pid)}
        time.sleep(0.1)  # liveness poll while the kernels stop
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def execute(
    stem: str, output: Path, parameters: dict[str, Any], log_path: Path, cell_timeout: float, run: NotebookRun,
    env: dict[str, str] | None = None,
) -> None:
    """Run notebook `stem` into `output`; the outcome goes into `run` (status, error, seconds).
    `env` is added to the kernel's environment. KeyboardInterrupt propagates (the runner marks
    the bundle interrupted)."""
    import papermill
    from nbclient.exceptions import CellTimeoutError, DeadKernelError
    from traitlets.config import Config

    handler = logging.FileHandler(log_path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    this_thread = threading.get_ident()  # notebooks may run side by side: each log gets its own lines
    handler.addFilter(lambda record: record.thread == this_thread)
    pm_logger = logging.getLogger("papermill")
    pm_logger.addHandler(handler)
    pm_logger.setLevel(logging.INFO)
    pm_logger.propagate = False  # cell output goes to the notebook's log file, not the terminal
    config = Config()
    config.KernelManager.transport = "ipc"
    runtime = os.environ.get("JUPYTER_RUNTIME_DIR") or tempfile.gettempdir()
    config.KernelManager.ip = os.path.join(runtime, f"{stem}-ipc")  # the IPC socket files' prefix
    config.KernelManager.connection_file = os.path.join(runtime, f"{stem}-kernel.json")
    started, kernels = time.perf_counter(), list[int]()
    try:
        papermill.execute_notebook(
            str(NOTEBOOKS_DIR / f"{stem}.ipynb"),
            str(output),
            parameters=parameters,
            kernel_name=KERNEL_NAME,
            progress_bar=False,  # the runner prints progress lines (bundle.progress)
            log_output=True,
            execution_timeout=cell_timeout,
            cwd=str(NOTEBOOKS_DIR),
            request_save_on_cell_execute=True,
            config=config,
            kernel_manager_class=_kernel_manager(env or {}, kernels),
        )
        run.status = "ok"
    except papermill.PapermillExecutionError as exc:
        run.status, run.error = "cell_error", f"{exc.ename}: {exc.evalue}"
        if exc.ename == "KeyboardInterrupt":
            run.status = "interrupted"
    except CellTimeoutError as exc:
        run.status, run.error = "timeout", f"a cell ran longer than {cell_timeout:.0f} s: {str(exc)[:200]}"
    except KeyboardInterrupt:
        run.status, run.error = "interrupted", "interrupted (Ctrl-C or SIGTERM)"
        raise
    except DeadKernelError as exc:  # killed after an interrupt it did not answer
        run.status, run.error = "interrupted", f"the kernel was stopped: {exc}"
    except Exception as exc:  # the kernel died, the notebook could not be read, ...
        run.status, run.error = "runner_error", f"{type(exc).__name__}: {exc}"
    finally:
        run.seconds = time.perf_counter() - started
        with _KERNELS_LOCK:
            _KERNELS.difference_update(kernels)
        pm_logger.removeHandler(handler)
        handler.close()


def clear_runner_values(source: str) -> str:
    """The injected-parameters cell without the run's server URL and bundle path."""
    lines = []
    for line in source.splitlines():
        match = _ASSIGNMENT.match(line)
        lines.append(f"{match.group(1)} = {CLEARED[match.group(1)]}" if match and match.group(1) in CLEARED else line)
    return "\n".join(lines)


def finish(output: Path, html_dir: Path, manifest: dict[str, Any], run: NotebookRun) -> None:
    """Post-process the executed notebook and write `<stem>.html` (no code) and `<stem>.full.html`."""
    from nbconvert import HTMLExporter

    if not output.exists():
        return
    nb = nbformat.read(output, as_version=4)
    for i, cell in enumerate(nb.cells):
        if "injected-parameters" in cell.get("metadata", {}).get("tags", []):
            cell["id"] = "injected-parameters"  # papermill's random id would make HTML differ run to run
            cell.source = clear_runner_values(cell.source)
        meta = cell.get("metadata", {}).get("papermill", {})
        if meta.get("duration") is not None:
            run.cells.append(
                {
                    "cell": i,
                    "seconds": round(float(meta["duration"]), 3),
                    "description": cell.source.splitlines()[0][:80] if cell.source else "",
                }
            )
    title = f"{run.label}: {run.brief}"  # the missed targets are listed in full in the header
    header = header_html(manifest, run.verdict, title=f"Dirty Runs evidence · {title}", pg=run.pg)
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(header, id="evidence-header"))
    nb.metadata["title"] = f"{title} · Dirty Runs evidence {manifest['revision'][:12]}"
    nbformat.write(nb, output)
    html_dir.mkdir(parents=True, exist_ok=True)
    for suffix, exclude in ((".html", True), (".full.html", False)):
        exporter = HTMLExporter(
            template_name="evidence",
            extra_template_basedirs=[str(TEMPLATES)],
            exclude_input=exclude,
            exclude_input_prompt=exclude,
            exclude_output_prompt=exclude,
        )
        body, _ = exporter.from_notebook_node(nb)
        (html_dir / f"{run.scenario}{suffix}").write_text(body)
