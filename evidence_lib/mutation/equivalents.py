"""The argued equivalents: generated mutants that no test can tell from the original, each with a
one-line argument, committed in `equivalents.toml` (reviewed like code). The report shows them as
`Ignored` with the argument as their `statusReason`; they count in neither the detected nor the
valid mutants (the schema's rule). `tests/test_mutation_triage.py` keeps the file honest: every
id is a mutant of this revision, every entry names its object and operator and argues."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

FILE = Path(__file__).with_name("equivalents.toml")


@dataclass(frozen=True)
class Equivalent:
    id: str
    object: str
    operator: str
    why: str


@cache
def entries(path: Path = FILE) -> tuple[Equivalent, ...]:
    if not path.is_file():
        return ()
    data = tomllib.loads(path.read_text())
    return tuple(Equivalent(key, str(v.get("object", "")), str(v.get("operator", "")), str(v.get("why", "")))
                 for key, v in data.items())  # fmt: skip


def equivalents() -> dict[str, str]:
    """mutant id -> the argument that it is equivalent."""
    return {e.id: e.why for e in entries()}
