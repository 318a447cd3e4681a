"""Applying a mutant, generated or hand-written, one way for all: SQL mutants are text run on top
of the candidate in one transaction (`apply_sql`); Python mutants (a worker function's mutated
source, a mutated SQL constant of the workers, or a documented worker seam of a control) are
swapped into the running process while the mutant is judged (`swapped`) and put back after.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, cast

from psycopg import sql as psql

from evidence_lib.engine import v2
from evidence_lib.engine.jsontypes import Json
from evidence_lib.errors import EvidenceError
from evidence_lib.mutation.controls import Seam
from evidence_lib.mutation.mutant import Mutant
from evidence_lib.pg.db import Conn
from evidence_lib.workers.config import ensure_json
from evidence_lib.workers.connections import ReconnectPolicy
from evidence_lib.workers.v2 import V2Worker


class MutantDoesNotCompile(EvidenceError):
    """The mutant's patch is refused: the server rejects its SQL, or its Python does not compile."""


def apply_sql(conn: Conn, mutant: Mutant) -> None:
    """Run a SQL mutant's patch on `conn` (inside the caller's transaction or as its own);
    PostgreSQL's refusal becomes MutantDoesNotCompile (the mutant is a CompileError)."""
    if mutant.kind != "sql" or not mutant.patch:
        return
    import psycopg

    try:
        with conn.transaction():
            conn.execute(mutant.patch.encode())
    except psycopg.Error as exc:
        raise MutantDoesNotCompile(f"{mutant.label}: {exc.sqlstate} {str(exc).splitlines()[0][:200]}") from exc


def _falsy_as_null(self: V2Worker, value: Json) -> Json:
    return ensure_json(value) or None


def _transport_error_as_failure(self: V2Worker, outcome: v2.Outcome, result: Json) -> tuple[v2.Outcome, Json]:
    return "failed", {"error": "TransportError", "message": "the report did not reach the server"}


def _every_try_counts(self: V2Worker, attempt: Any) -> bool:
    return True


def _no_pause(self: V2Worker, tries: int, left: float) -> float:
    return 0.0


def _library_reconnects(self: V2Worker) -> ReconnectPolicy:
    return _DoublingPolicy()


def _wait_like_a_pool(self: V2Worker, left: float) -> float:
    return 30.0  # a connection pool's default wait, whatever the lease says


class _DoublingPolicy(ReconnectPolicy):
    """A connection pool's default reconnect: 1 s, then doubling, no cap."""

    def __init__(self) -> None:
        super().__init__(connect_timeout=2, initial=1.0, cap=3600.0)

    def delay(self, failures: int) -> float:
        return float(self.initial * 2 ** max(failures - 1, 0))


# seam -> the V2Worker attributes it replaces while the mutant's targets run
SEAMS: dict[Seam, tuple[tuple[str, Callable[..., Any]], ...]] = {
    "falsy_results_as_null": (("encode_result", _falsy_as_null),),
    "transport_error_as_handler_failure": (("resubmission", _transport_error_as_failure),),
    "settle_without_waiting": (("counts_as_submitted", _every_try_counts), ("retry_delay", _no_pause)),
    "pool_waits_past_the_horizon": (
        ("reconnect_policy", _library_reconnects),
        ("settlement_wait", _wait_like_a_pool),
    ),
}



def _rebind(old: object, new: object) -> list[tuple[object, str, object]]:
    """Point every loaded evidence_lib module attribute that holds `old` at `new`; returns what
    to put back."""
    undo: list[tuple[object, str, object]] = []
    for name, module in list(sys.modules.items()):
        if not name.startswith("evidence_lib") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is old:
                undo.append((module, attr, old))
                setattr(module, attr, new)
    return undo


def _compiled(mutant: Mutant, owner: object, name: str) -> Any:
    """The mutated function, compiled in its module's namespace (and its class, for `super()`)."""
    module_name, _ = mutant.target.split(":", 1)
    module = importlib.import_module(module_name)
    source = mutant.patch
    wrapped = "class __Mutant:\n" + "".join(f"    {line}\n" for line in source.splitlines())
    namespace: dict[str, Any] = {}
    try:
        exec(compile(wrapped, f"<mutant {mutant.id}>", "exec"), vars(module), namespace)
    except SyntaxError as exc:
        raise MutantDoesNotCompile(f"{mutant.label}: {exc}") from exc
    function = vars(namespace["__Mutant"])[name]
    inner = getattr(function, "__func__", function)
    for cell in getattr(inner, "__closure__", None) or ():
        if cell.cell_contents is namespace["__Mutant"] and isinstance(owner, type):
            cell.cell_contents = owner  # zero-argument super() names the real class
    return function


@contextlib.contextmanager
def swapped(mutant: Mutant) -> Iterator[None]:
    """Swap a Python mutant (or a control's worker seam) in while the block runs."""
    if mutant.kind == "seam":
        with _seam(cast(Seam, mutant.target)):
            yield
        return
    if mutant.kind != "python":
        yield
        return
    module_name, qualname = mutant.target.split(":", 1)
    module = importlib.import_module(module_name)
    *owner_path, name = qualname.split(".")
    owner: object = module
    for part in owner_path:
        owner = getattr(owner, part)
    old = vars(owner)[name] if isinstance(owner, type) else getattr(owner, name)
    if mutant.family == "py-sql":
        new: object = psql.SQL(mutant.patch) if isinstance(old, psql.SQL) else mutant.patch
    else:
        new = _compiled(mutant, owner, name)
    undo = [(owner, name, old)]
    setattr(owner, name, new)
    if not isinstance(owner, type):
        undo += _rebind(old, new)
    try:
        yield
    finally:
        for holder, attr, value in reversed(undo):
            setattr(holder, attr, value)


@contextlib.contextmanager
def _seam(name: Seam) -> Iterator[None]:
    """Swap a control's worker seam into V2Worker while its targets run."""
    originals = [(attr, V2Worker.__dict__.get(attr)) for attr, _ in SEAMS[name]]
    for attr, replacement in SEAMS[name]:
        setattr(V2Worker, attr, replacement)
    try:
        yield
    finally:
        for attr, original in originals:
            if original is None:
                delattr(V2Worker, attr)
            else:
                setattr(V2Worker, attr, original)
