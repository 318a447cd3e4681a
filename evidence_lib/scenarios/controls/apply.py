"""Turning a mutant into a change: the SQL patch (edited copies of engine functions from `sql/`,
created with `create or replace` on top of the candidate, plus any statements) and the worker
seam it swaps in while its targets run."""

from __future__ import annotations

import contextlib
import difflib
from collections.abc import Callable, Iterator
from typing import Any

from evidence_lib import SQL_DIR
from evidence_lib.engine import v2
from evidence_lib.engine.jsontypes import Json
from evidence_lib.errors import EvidenceError
from evidence_lib.scenarios.controls.catalogue import Mutant, Seam
from evidence_lib.workers.config import ensure_json
from evidence_lib.workers.connections import ReconnectPolicy
from evidence_lib.workers.v2 import V2Worker


class MutantDoesNotApply(EvidenceError):
    """An edit's text is not in the candidate's `sql/` file exactly once."""


def edited_files(mutant: Mutant) -> dict[str, tuple[str, str]]:
    """`sql/` file name -> (candidate text, mutated text), for every file the mutant edits."""
    out: dict[str, tuple[str, str]] = {}
    for edit in mutant.edits:
        original = out[edit.file][0] if edit.file in out else (SQL_DIR / edit.file).read_text()
        text = out[edit.file][1] if edit.file in out else original
        count = text.count(edit.old)
        if count != 1:
            raise MutantDoesNotApply(f"mutant {mutant.name}: {edit.file} holds the edited text {count} times, not once")
        out[edit.file] = (original, text.replace(edit.old, edit.new))
    return out


def patch_sql(mutant: Mutant) -> str:
    """The mutant as SQL to run on top of the candidate artifact, in one transaction."""
    parts = []
    for name, (_, text) in edited_files(mutant).items():
        if "create function " not in text:
            raise MutantDoesNotApply(f"mutant {mutant.name}: {name} defines no function")
        parts.append(
            f"-- mutant {mutant.name}: {name}\n" + text.replace("create function ", "create or replace function ", 1)
        )
    if mutant.statements:
        parts.append(f"-- mutant {mutant.name}: statements\n{mutant.statements}")
    return "\n".join(parts)


def patch_diff(mutant: Mutant) -> str:
    """The patch as a unified diff against `sql/` (the statements and seams, described)."""
    lines: list[str] = []
    for name, (before, after) in edited_files(mutant).items():
        lines += difflib.unified_diff(before.splitlines(), after.splitlines(), f"sql/{name}", f"mutant/{name}",
                                      lineterm="", n=1)  # fmt: skip
    if mutant.statements:
        lines.append(f"+ {mutant.statements}")
    if mutant.seam:
        replaced = ", ".join(name for name, _ in SEAMS[mutant.seam])
        lines.append(f"worker seam V2Worker: {replaced} replaced ({mutant.seam})")
    return "\n".join(lines)


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


@contextlib.contextmanager
def seam(mutant: Mutant) -> Iterator[None]:
    """Swap the mutant's worker seam into V2Worker while its targets run (nothing otherwise)."""
    if mutant.seam is None:
        yield
        return
    originals = [(name, V2Worker.__dict__.get(name)) for name, _ in SEAMS[mutant.seam]]
    for name, replacement in SEAMS[mutant.seam]:
        setattr(V2Worker, name, replacement)
    try:
        yield
    finally:
        for name, original in originals:
            if original is None:
                delattr(V2Worker, name)
            else:
                setattr(V2Worker, name, original)
