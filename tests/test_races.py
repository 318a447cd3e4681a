"""The races as isolation specs: every interleaving of every spec, in both queue modes, passes its
checks and reproduces the committed expected transcript; the runner itself follows the rules."""

from __future__ import annotations

import pytest

from evidence_lib.engine.flows import QueueMode
from evidence_lib.harness.isolation import RaceSpec, Release, Step, interleave, run_spec, transcript
from evidence_lib.pg.db import Server
from evidence_lib.scenarios import race_setups, race_specs, races
from evidence_lib.scenarios.support.parts import clones

SPECS = {spec.name: spec for spec in races.SPECS}


@pytest.mark.parametrize("mode", ["flow", "step"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_every_interleaving_passes_and_matches_the_expected_transcript(
    server: Server, template_db: str, name: str, mode: QueueMode
) -> None:
    runs = run_spec(SPECS[name], mode, clones(server, template_db, prefix="race"))
    assert [r.transcript() for r in runs if not r.passed] == []
    assert transcript(runs) in races.expected(name), races.compare(name, runs)


def test_every_interleaving_keeps_each_sessions_order() -> None:
    merged = interleave([["a1", "a2"], ["b1"], ["c1", "c2"]])
    assert len(merged) == len(set(merged)) == 30  # 5! / (2! 1! 2!)
    assert all(m.index("a1") < m.index("a2") and m.index("c1") < m.index("c2") for m in merged)


def test_a_step_sent_to_a_session_that_still_waits_is_an_invalid_permutation(server: Server, template_db: str) -> None:
    point = "claim.before_guarded_update"
    claim = race_specs.CLAIM
    spec = RaceSpec(
        name="invalid",
        description="w1 parks at the hook, then is asked to run again before the release",
        setup=race_setups.read_a,
        sessions={"w1": (Step("w1_a", claim), Step("w1_b", "select 1")), "ctl": (Release("ctl_release", point),)},
        checks=(),
        hooks={"w1": (point,)},
        holds=(point,),
        permutations=(("w1_a", "w1_b", "ctl_release"),),
    )
    [run] = run_spec(spec, "flow", clones(server, template_db, prefix="race"))
    assert run.invalid == "step w1_b while session w1 is still waiting"


def test_every_spec_has_its_expected_file() -> None:
    assert [name for name in SPECS if not races.expected(name)] == []
