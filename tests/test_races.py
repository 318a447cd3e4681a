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


def test_a_wait_on_a_session_that_is_still_running_is_not_shown_as_blocked(db_url: str) -> None:
    """`stuck_waits`: s2 waits on s1's row lock while s1 itself waits on a backend outside the race
    (so s1 is running as far as the race is concerned): s2 is not "blocked" (that wait ends without
    any step of ours, in an order the scheduler picks). Once s1 finishes its step and keeps its
    transaction open, s1 is parked and s2's wait on it is shown."""
    from evidence_lib.harness.locks import stuck_waits, wait_until_blocked
    from evidence_lib.harness.sessions import Controller, Session
    from evidence_lib.pg.db import connect

    with connect(db_url, application_name="outsider") as outsider, connect(db_url) as setup:
        setup.execute("create table t (id int primary key, v int); insert into t values (1, 0)")
        outsider.execute("select pg_advisory_lock(42)")
        controller = Controller(db_url, timeout=5)
        s1, s2 = Session(db_url, "s1"), Session(db_url, "s2")
        controller.members = {s1.pid, s2.pid}
        try:
            s1.conn.execute("begin")
            first = s1.send(lambda c: c.execute("update t set v = 1 where id = 1; select pg_advisory_lock(42)"))
            wait_until_blocked(controller.conn, s1.pid, by=outsider.info.backend_pid, timeout=5)
            assert controller.waits(s1, busy={s1.pid}) == []  # blocked by a backend outside the race only
            second = s2.send(lambda c: c.execute("update t set v = 2 where id = 1"))
            wait_until_blocked(controller.conn, s2.pid, by=s1.pid, timeout=5)  # proven in pg_locks ...
            members = {s1.pid, s2.pid, controller.pid}
            assert stuck_waits(controller.conn, s2.pid, members, {controller.pid}) == []  # ... but s1 runs
            assert controller.waits(s2, busy={s1.pid, s2.pid}) == []
            outsider.execute("select pg_advisory_unlock(42)")
            first.result(timeout=5)  # s1's step is done, its transaction (and row lock) stays open
            found = controller.settle(s2, second, busy={s2.pid})
            assert found and found[0].locktype == "transactionid" and s1.pid in found[0].blocked_by
            s1.send(lambda c: c.execute("commit")).result(timeout=5)
            second.result(timeout=5)
        finally:
            s1.close()
            s2.close()
            controller.close()


def test_relation_extension_and_speculative_insertion_waits_are_never_protocol_waits() -> None:
    from evidence_lib.harness.locks import PROTOCOL_LOCKTYPES

    assert {"extend", "page", "frozenid", "spectoken"}.isdisjoint(PROTOCOL_LOCKTYPES)
    assert {"tuple", "transactionid", "advisory", "relation"} <= PROTOCOL_LOCKTYPES
