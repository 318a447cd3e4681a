"""Every generated mutant of this revision, by id (generated once per process)."""

from __future__ import annotations

from functools import cache

from evidence_lib.errors import EvidenceError
from evidence_lib.mutation.generate import Generated, sql_mutants
from evidence_lib.mutation.mutant import Mutant
from evidence_lib.mutation.pysource import python_mutants


class UnknownMutant(EvidenceError):
    """No mutant of this revision has that id (its object changed since it was recorded)."""


@cache
def generated() -> Generated:
    """The SQL mutants, then the Python ones."""
    out = sql_mutants()
    out.extend(python_mutants())
    return out


@cache
def _by_id() -> dict[str, Mutant]:
    return {m.id: m for m in generated().mutants}


def find(mutant_id: str) -> Mutant:
    try:
        return _by_id()[mutant_id]
    except KeyError:
        raise UnknownMutant(f"no generated mutant has id {mutant_id}: its object changed since it was recorded"
                            " (re-run the sweep and update the catalogue or the equivalents file)") from None
