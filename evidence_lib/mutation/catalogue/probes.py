"""Generated survivors of the whole sweep that a SQL probe with a golden transcript now kills
(`scenarios.regress`, `tests/regress/<probe>.sql`): each joins the negative controls by its stable
id, so every bundle re-checks it with its probe. The entries (`probe_kills.toml`: name, probe, what
the mutant breaks) come from the triage of the survivors of 15a39ef (docs/mutation.md)."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

from evidence_lib.mutation.controls import Control, Target

FILE = Path(__file__).with_name("probe_kills.toml")
PROBE_PART = "regress_"  # the parts of the SQL probes (scenarios.regress): regress_<probe>


def probe_target(probe: str) -> Target:
    """The part that runs probe `probe`, and its gate."""
    return Target("model_check", f"{PROBE_PART}{probe}", (f"{probe}_transcript_matches_expected",), None)


def killed_by_a_probe(control: Control) -> bool:
    """Whether every target of `control` is a SQL probe's part (a control of `probe_kills`)."""
    return bool(control.targets) and all(t.part.startswith(PROBE_PART) for t in control.targets)


@cache
def probe_kills(path: Path = FILE) -> tuple[Control, ...]:
    entries = tomllib.loads(path.read_text())
    return tuple(
        Control(str(e["name"]), str(e["breaks"]), (probe_target(str(e["probe"])),), generated=mutant_id)
        for mutant_id, e in entries.items()
    )
