"""The project's own tests of the worker code as parts of the mutation sweep, the oracle PIT and
mutmut use: each test function of `WORKER_TESTS` is a part `pytest/tests/<file>::<test>`, run by
pytest in this process (so a Python mutant swapped in here is the code it tests) on the sweep's
server and a clone of the candidate's template, each test's assertions its gate.

A test's assertion failing is its gate turning red; any other exception is handed to the sweep as
what stopped the part (the engine's SQLSTATE, the mutated code raising, a lost connection: see
`mutation.judging`), so a test that fails for a reason outside the engine and the worker code is
a RuntimeError, never a kill. A test that asks for the session's `server` may crash or restart it:
it is never a part (the sweep's jobs share one server). A test pytest skips has no gate: its
part says nothing.
"""

from __future__ import annotations

import ast
import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import _pytest.outcomes
import psycopg

from evidence_lib import PROJECT_ROOT
from evidence_lib.mutation.controls import Target
from evidence_lib.mutation.coverage import UNIT_TESTS, WORKER_TESTS, python_lines
from evidence_lib.mutation.judging import TargetRun
from evidence_lib.pg import servers
from evidence_lib.pg.db import Server, ServerUnavailable
from evidence_lib.results.gate import Gate

TESTS = PROJECT_ROOT / "tests"
OWNS_SERVER = "server"  # a fixture argument: the test may crash the server every job shares
PYTEST_ARGS = ("-o", "addopts=", "-p", "no:terminal", "-p", "no:cacheprovider", "-p", "no:faulthandler",
               "--capture=sys")  # fmt: skip
RAN = (0, 1)  # pytest's exit codes when it ran the tests (1: some failed); others: it could not


class PytestDidNotRun(Exception):
    """pytest stopped before it ran the test (a usage error, nothing collected, an internal error):
    the part cannot judge, a RuntimeError, never a silent pass."""


def targets() -> list[Target]:
    """One part per test function of `WORKER_TESTS` (every parametrization of it together)."""
    out: list[Target] = []
    for file in WORKER_TESTS:
        path = PROJECT_ROOT / file
        if not path.is_file():
            continue
        tests = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef)]
        for node in tests:
            if node.name.startswith("test_") and OWNS_SERVER not in {a.arg for a in node.args.args}:
                out.append(Target(UNIT_TESTS.rstrip("/"), f"{file}::{node.name}", (), None))
    return out


def is_unit_test(target: Target) -> bool:
    return f"{target.scenario}/" == UNIT_TESTS


class _Collect:
    """A pytest plugin: each test's verdict as a gate, each non-assertion failure as an escape."""

    def __init__(self) -> None:
        self.gates: list[Gate] = []
        self.escaped: list[BaseException] = []

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" and report.passed:
            self.gates.append(Gate(report.nodeid.split("::", 1)[1], True))

    def pytest_exception_interact(self, node: Any, call: Any, report: Any) -> None:
        exc = call.excinfo.value
        name = node.nodeid.split("::", 1)[-1]
        if call.when == "call" and _the_test_failed(exc):
            said = str(exc).splitlines()[0][:200] if str(exc) else ""
            self.gates.append(Gate(name, False, f"{type(exc).__name__}: {said}"))
        else:
            self.escaped.append(exc)


def _the_test_failed(exc: BaseException) -> bool:
    """Whether the test itself failed on what the code under test did: an assertion, pytest's own
    `fail` or `raises`, or any exception the test's own code raised on a value it was handed (a
    TypeError on a None the mutant returned). Everything else, a psycopg error (the engine's
    SQLSTATE, a statement timeout, a lost connection) or an exception raised inside
    `evidence_lib`, is judged by the sweep as what stopped the part (`mutation.judging`)."""
    if isinstance(exc, psycopg.Error | ServerUnavailable):
        return False
    tb = exc.__traceback__
    last = ""
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    if isinstance(exc, AssertionError | _pytest.outcomes.Failed):
        return "/evidence_lib/" not in last
    return last.startswith(str(TESTS))


@contextlib.contextmanager
def _environment(server: Server, template: str, prefix: str) -> Iterator[None]:
    """What tests/conftest.py reads: the sweep's server, the candidate's template, the prefix."""
    given = {"DATABASE_URL": server.maintenance_url, servers.TEST_TEMPLATE_ENV: template,
             servers.TEST_PREFIX_ENV: prefix}  # fmt: skip
    saved = {k: os.environ.get(k) for k in given}
    os.environ.update(given)
    if str(PROJECT_ROOT) not in sys.path:
        sys.path.insert(0, str(PROJECT_ROOT))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _forget_tests() -> None:
    """Drop the test modules a previous run imported: a swapped mutant must be what they import."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if file.startswith(str(TESTS)) or name == "tests" or name.startswith("tests."):
            del sys.modules[name]


def run_unit_test(server: Server, template: str, target: Target, deadline: float, tag: str,
                  coverage: bool = False) -> TargetRun:  # fmt: skip
    """Run one test function by pytest within `deadline` seconds (its databases cloned from
    `template`); with `coverage`, record the lines of the worker code it ran."""
    import pytest

    from evidence_lib.scenarios.support.targets import terminate

    collect = _Collect()
    prefix = f"nc{tag}"
    node = str(PROJECT_ROOT / target.part)
    args = [node, *PYTEST_ARGS, "--rootdir", str(PROJECT_ROOT), "-c", str(PROJECT_ROOT / "pyproject.toml")]
    started = time.perf_counter()
    _forget_tests()

    def go() -> None:
        try:
            code = pytest.main(args, plugins=[collect])
        except BaseException as exc:  # pytest itself broke: the part could not judge
            collect.escaped.append(exc)
            return
        if code not in RAN:
            collect.escaped.append(PytestDidNotRun(f"pytest {target.part}: exit code {int(code)}"))

    worker = threading.Thread(target=go, name=f"unit-{tag}", daemon=True)
    lines: dict[str, list[int]] = {}
    recorded = python_lines() if coverage else contextlib.nullcontext(lines)
    with _environment(server, template, prefix), recorded as lines:
        worker.start()
        worker.join(deadline)
        hit = worker.is_alive()
        if hit:
            terminate(server, prefix)
            worker.join(10)
    gates = list(collect.gates)
    if hit:
        gates.append(Gate("finished_within_the_deadline", False, f"still running after {deadline:.0f} s"))
    return TargetRun(target, gates, time.perf_counter() - started, hit, {}, list(collect.escaped), dict(lines))
