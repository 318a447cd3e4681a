"""Triage ends in the repository: every argued equivalent and every survivor that joined the
negative controls names a mutant of this revision, and argues or names its gate."""

from __future__ import annotations

from evidence_lib.mutation.catalogue import catalogue
from evidence_lib.mutation.equivalents import entries
from evidence_lib.mutation.registry import generated


def test_every_argued_equivalent_is_a_mutant_of_this_revision_with_its_argument() -> None:
    by_id = {m.id: m for m in generated().mutants}
    stale = [e.id for e in entries() if e.id not in by_id]
    assert stale == [], f"no longer mutants of this revision (re-run make mutation and update): {stale}"
    for e in entries():
        mutant = by_id[e.id]
        assert e.object == mutant.obj and e.operator == f"{mutant.family}/{mutant.operator}", e.id
        assert len(e.why.split()) >= 5, f"{e.id}: an argument, not a word"


def test_every_generated_survivor_in_the_catalogue_is_a_mutant_of_this_revision() -> None:
    by_id = {m.id for m in generated().mutants}
    controls = [c for c in catalogue() if c.generated]
    assert [c.name for c in controls if c.generated not in by_id] == []
    for control in controls:
        assert control.targets and all(t.gates for t in control.targets), control.name
        assert control.mutant().id == control.generated
