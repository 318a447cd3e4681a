"""A gate: one pass/fail verdict a scenario computed from database state read back after the
fact, under a key unique in its bundle. The lowest room of the results: the scenarios record
gates, the bundle shows them, the mutation sweep judges mutants by them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Gate:
    name: str
    passed: bool
    detail: str = ""
    mode: str = ""
    point: str = ""  # a parameter point such as "workers=2" when one gate is computed at several

    def key(self, scenario: str) -> str:
        """The gate's unique key in a bundle: scenario/mode/name[@point]."""
        return f"{scenario}/{self.mode or '-'}/{self.name}" + (f"@{self.point}" if self.point else "")


class DuplicateGate(ValueError):
    """A gate was recorded twice under one key; a second verdict would hide the first."""
