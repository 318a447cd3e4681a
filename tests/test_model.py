"""The model check: the candidate gives no counterexample, a mutant gives one that shrinks to a
short history replayable by its seed, and shrunk counterexamples kept as regression histories
(replayed step by step on the candidate, where they must pass, and on their mutant, where they
must fail)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from evidence_lib.model import observe, ops
from evidence_lib.model.bench import Bench, ModelMismatch
from evidence_lib.model.check import check, machine_for
from evidence_lib.model.machine import EngineMachine
from evidence_lib.model.reference import Model, Outcome
from evidence_lib.mutation.catalogue import catalogue
from evidence_lib.mutation.controls import patch_sql
from evidence_lib.pg import db
from evidence_lib.pg.db import Server, connect

MUTANTS = {m.name: m for m in catalogue()}


@pytest.fixture
def mutant_template(server: Server, template_db: str, request: pytest.FixtureRequest) -> Iterator[str]:
    with db.scratch_database(server, template=template_db, prefix="mut") as url:
        with connect(url) as conn, conn.transaction():
            conn.execute(patch_sql(MUTANTS[request.param]).encode())
        yield db.database_name(url)


def test_the_candidate_gives_no_counterexample(server: Server, template_db: str) -> None:
    outcome = check(server, template_db, examples=12, steps=30, seed=7)
    assert outcome.tour is None, outcome.tour.text() if outcome.tour else ""
    assert outcome.counterexample is None, outcome.counterexample.text() if outcome.counterexample else ""
    assert outcome.bench.histories >= 12 and outcome.bench.steps > 100
    operations = {op for (_, op, _) in outcome.bench.coverage}
    wanted = {"define", "claim (drive)", "reconcile", "settle (drive)", "settle (lost ack)", "drop_queue",
              "race: claim vs claim", "take_over (current claim)", "v1_write", "read"}  # fmt: skip
    assert wanted <= operations, operations


@pytest.mark.parametrize(
    "mutant_template", ["take_over_before_the_horizon", "reconcile_action_outside_its_subtransaction"], indirect=True
)
def test_the_tour_kills_what_it_walks_through(server: Server, mutant_template: str) -> None:
    found = check(server, mutant_template, examples=1, steps=5, seed=1, shrink=False)
    assert found.tour is not None and "ModelMismatch" in found.tour.error, found


@pytest.mark.parametrize("mutant_template", ["settle_does_not_bump_the_generation"], indirect=True)
def test_a_mutant_gives_a_shrunk_counterexample(server: Server, mutant_template: str) -> None:
    # the shrink's length is judged, so it is bounded by a count of shrinks (the same on any machine:
    # 10 take about 20 s here and give 7 steps; bounded by the evidence's 30 s, a loaded machine
    # once stopped at 9), and the time limit is only a liveness bound
    found = check(server, mutant_template, examples=40, steps=12, seed=2, tour_first=False, shrink_seconds=300,
                  max_shrinks=10)  # fmt: skip
    assert found.counterexample is not None, "the model check must kill this mutant"
    ce = found.counterexample
    # define, start, claim, settle, plus at most four
    assert ce.shrunk and len(ce.transcript) <= 8, ce.text()
    assert "ModelMismatch" in ce.error and "settle" in ce.transcript[-1], ce.text()


@pytest.mark.parametrize("mutant_template", ["settle_does_not_bump_the_generation"], indirect=True)
def test_the_seed_replays_the_same_history(server: Server, mutant_template: str) -> None:
    runs = [
        check(server, mutant_template, examples=20, steps=20, seed=5, shrink=False, tour_first=False) for _ in range(2)
    ]
    texts = [[PIDS.sub("pid <n>", IDS.sub("<id>", line)) for line in r.counterexample.transcript]
             for r in runs if r.counterexample]  # fmt: skip
    assert len(texts) == 2 and texts[0] == texts[1], texts


IDS = re.compile(r"\b[0-9a-f]{8}(-[0-9a-f]{4}){0,3}(-[0-9a-f]{12})?\b")
PIDS = re.compile(r"pid \d+")  # a race names its sessions' backends: the server's choice, not the history's


def replay_settle_replay(machine: EngineMachine) -> None:
    """A shrunk counterexample (mutant settle_replay_ignores_the_result, seed 11), kept as a
    regression history: a replay with another result must be a conflict, not a replay."""
    machine.check(ops.define("m1", "flow", "ab"))
    machine.check(ops.start_run("m1", {"n": 1}))
    run = next(iter(machine.model.runs))
    msg = machine.msg_ids[(run, "A")]
    machine.check(ops.claim(run, "A", "m1", [msg], msg, "right"))
    claim = next(iter(machine.model.claims))
    machine.check(ops.settle(claim, "completed", 0, "fresh", run))
    machine.check(ops.settle(claim, "completed", {"ok": 1}, "replay", run))


def replay_settle_archives(machine: EngineMachine) -> None:
    """A shrunk counterexample (mutant settle_does_not_archive_the_message): an accepted
    settlement archives the claimed message, and its replay changes nothing."""
    machine.check(ops.define("m1", "step", "ab"))
    machine.check(ops.start_run("m1", {"n": 1}))
    run = next(iter(machine.model.runs))
    msg = machine.msg_ids[(run, "A")]
    machine.check(ops.claim(run, "A", "m1__a", [msg], msg, "right"))
    claim = next(iter(machine.model.claims))
    machine.check(ops.settle(claim, "completed", "done", "fresh", run))
    machine.check(ops.settle(claim, "completed", "done", "replay", run))
    machine.check(ops.reconcile(run, 8))


REGRESSIONS = {
    "settle_replay_ignores_the_result": replay_settle_replay,
    "settle_does_not_archive_the_message": replay_settle_archives,
}


def machine_on(server: Server, template: str) -> EngineMachine:
    return machine_for(Bench(server, template))()


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_regression_histories_pass_on_the_candidate(server: Server, template_db: str, name: str) -> None:
    machine = machine_on(server, template_db)
    try:
        REGRESSIONS[name](machine)
    finally:
        machine.teardown()


@pytest.mark.parametrize("mutant_template", sorted(REGRESSIONS), indirect=True)
def test_regression_histories_fail_on_their_mutant(
    server: Server, mutant_template: str, request: pytest.FixtureRequest
) -> None:
    name = request.node.callspec.params["mutant_template"]
    machine = machine_on(server, mutant_template)
    try:
        with pytest.raises(ModelMismatch):
            REGRESSIONS[name](machine)
    finally:
        machine.teardown()


def _in_backoff() -> Model:
    """A model whose v2 run r1 is dirty (A settled) and backing off until [10.0, 10.1]."""
    model = Model()
    model.define(ops.flow_def("m1", "flow", "ab"))
    model.start_run("m1", {"n": 1}, 8, "r1", (0.0, 0.1))
    model.claim("r1", "A", "m1", [5], 5, (0.0, 0.1), "c1")
    model.settle("c1", "completed", {}, 2, now=(0.0, 0.1))
    run = model.runs["r1"]
    assert run.requested > run.processed
    run.health, run.errors, run.next_attempt = "backoff", 1, (10.0, 10.1)
    return model


def test_an_instant_the_checker_accepts_outside_its_window_is_not_answered_with_certainty() -> None:
    """The checker accepts a database instant up to TOLERANCE outside the model's window, so a
    question asked inside that margin is ambiguous: the CI run on PostgreSQL 15 whose backoff the
    model called "not over" while the engine, its instant accepted, found it over."""
    assert observe.differences({"next_attempts": {"r1": (10.0, 10.1)}}, {"next_attempts": {"r1": 10.0 - 0.03}}) == []
    model = _in_backoff()
    assert model.due((9.98, 9.99)) == [] and model.ambiguous  # 20 ms after the accepted instant: not certain
    other = model.copy()
    other.force = {q: False for q in model.ambiguous}
    assert other.due((9.98, 9.99)) == ["r1"]
    far = _in_backoff()
    assert far.due((9.90, 9.94)) == [] and not far.ambiguous  # before the widened window: certain
    assert far.due((10.16, 10.2)) == ["r1"] and not far.ambiguous  # after it: certain


def test_a_run_forced_due_by_reconcile_next_is_reconciled_not_skipped() -> None:
    """v2_reconcile_next's choice and the v2_reconcile it calls ask one question about the
    backoff: forced over, the run is reconciled (the engine's clock does not go back between)."""
    model = _in_backoff()
    assert model.reconcile_next(8, (10.0, 10.05)) == Outcome("empty") and model.ambiguous
    other = _in_backoff()
    other.force = {q: False for q in model.ambiguous}
    answer = other.reconcile_next(8, (10.0, 10.05))
    assert answer.kind == "value" and answer.value[0] == "r1" and answer.value[2] == 1  # B dispatched


def test_an_ambiguous_instant_gives_two_candidate_answers() -> None:
    """A takeover whose call window straddles the lease horizon: the model answers both ways."""
    model = Model()
    model.define(ops.flow_def("m1", "flow", "ab"))
    model.start_run("m1", {"n": 1}, 8, "r1", (0.0, 0.1))
    model.claim("r1", "A", "m1", [5], 5, (0.0, 0.1), "c1")
    lease = model.claims["c1"].lease
    before = model.copy()
    assert before.take_over("r1", "A", "c1", "m1", [5], 5, (lease[0] - 0.05, lease[1]), "c2").kind == "error"
    assert before.ambiguous
    after = model.copy()
    after.force = {q: False for q in before.ambiguous}
    assert after.take_over("r1", "A", "c1", "m1", [5], 5, (lease[0] - 0.05, lease[1]), "c2").kind == "value"
