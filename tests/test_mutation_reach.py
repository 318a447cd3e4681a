"""The reach oracle tries a mutant where its function refused, not only where it returned:
PostgreSQL counts no call that raised, nor one an exception block rolled back, nor a call refused
its privilege. Before `callgraph`, a guard removed from a group call, a loop variable no longer
reset after an item that raised, and a grant given to the wrong role all came out Survived."""

from __future__ import annotations

import psycopg

from evidence_lib.mutation.callgraph import call_graph, raised_in
from evidence_lib.mutation.mutant import Mutant, Verdict
from evidence_lib.mutation.oracles import ModelOracle
from evidence_lib.mutation.reach import ReachOracle
from evidence_lib.mutation.registry import generated
from evidence_lib.mutation.states import touches, written
from evidence_lib.pg.db import Server


def _one(obj: str, operator: str, text: str = "") -> Mutant:
    return next(m for m in generated().mutants if m.obj == obj and m.operator == operator and text in m.patch)


def test_an_error_names_the_functions_it_passed_through() -> None:
    context = ("PL/pgSQL function engine.v2_claim(uuid,text,text,bigint[]) line 40 at RAISE\n"
               "SQL statement \"select g.* from engine.v2_claim(...)\"\n"
               "PL/pgSQL function engine.v2_claim_all(uuid[],text[],text[],bigint[]) line 25 at SQL statement\n"
               'SQL function "_task_input" statement 1')  # fmt: skip
    assert raised_in([context]) == {"v2_claim", "v2_claim_all", "_task_input"}
    assert raised_in(["permission denied for function v2_settle_all\n"]) == {"v2_settle_all"}
    assert raised_in(["duplicate key value violates unique constraint\n"]) == set()


def test_what_an_exception_block_may_have_swallowed_counts_as_reached() -> None:
    graph = call_graph()
    assert {"v2_claim_all", "v2_settle_all", "v2_reconcile_all", "v2_reconcile"} <= graph.swallowing
    assert {"v2_claim", "_hook"} <= graph.reached(["v2_claim_all"], [])
    assert "v2_claim" not in graph.reached(["v2_settle"], [])  # no exception block: only what ran


def test_refusals_reach_their_guards(server: Server, template_db: str) -> None:
    mutants = [
        _one("function engine.v2_claim_all", "ConditionToFalse"),  # the DR008 guard gone
        _one("function engine.v2_claim_all", "V_grantDeleted"),  # a grant leaks into a refusal
        _one("function engine.v2_reconcile_all", "V_stateDeleted"),  # a refusal leaks into a report
    ]
    grant = next(m for m in generated().mutants if m.family == "privilege" and "v2_claim_all" in m.patch
                 and m.operator == "GrantedToOtherRole")  # fmt: skip
    verdicts: dict[str, Verdict] = {}
    stats = ReachOracle(server, template_db, [*mutants, grant], verdicts.__setitem__, examples=0).run()
    assert stats.candidate_agrees, stats.candidate_problem
    for mutant in [*mutants, grant]:
        verdict = verdicts[mutant.id]
        assert verdict.status == "Killed" and verdict.by == "model: the reach oracle", (mutant.operator, verdict)


def test_a_triggers_refusal_in_a_schema_probe_reaches_the_trigger(server: Server, template_db: str) -> None:
    """The schema probes catch the error of the write they make (a superuser write the schema must
    refuse); the trigger function that refused it is reached all the same, so a mutant that lets
    the write through is killed by the reach oracle (both survived it before)."""
    mutants = [_one("function engine._run_work_generations_are_monotonic", "RaiseDeleted"),
               _one("function engine._task_claims_are_history", "RaiseDeleted")]  # fmt: skip
    verdicts: dict[str, Verdict] = {}
    stats = ReachOracle(server, template_db, mutants, verdicts.__setitem__, examples=0).run()
    assert stats.candidate_agrees, stats.candidate_problem
    for mutant in mutants:
        verdict = verdicts[mutant.id]
        assert verdict.status == "Killed" and verdict.by == "model: the reach oracle", verdict


def test_a_trial_that_leaves_another_state_replays_only_its_own_history(server: Server, template_db: str) -> None:
    """Two mutants of v2_reconcile agree with the model in a tour but leave another state there:
    only that tour is replayed with each (never every history), one is killed by the flow tour's
    replay, the other agrees there, is tried again from the next history on, diverges in the step
    tour too and agrees in its replay; the whole replay gives the same statuses."""
    by_id = {m.id: m for m in generated().mutants}
    killed, agrees = by_id.get("7d40ab09d4bb"), by_id.get("ac46dbd9768c")
    assert killed is not None and agrees is not None, "v2_reconcile changed: pick two mutants that diverge again"
    verdicts: dict[str, Verdict] = {}
    stats = ReachOracle(server, template_db, [killed, agrees], verdicts.__setitem__, examples=0).run()
    assert stats.candidate_agrees, stats.candidate_problem
    assert (stats.replayed, stats.replayed_parts) == (0, 3), stats
    assert (verdicts[killed.id].status, verdicts[killed.id].by) == ("Killed", "model: the tour"), verdicts[killed.id]
    assert verdicts[agrees.id].status == "Survived" and "tour:flow, tour:step" in verdicts[agrees.id].detail, verdicts[
        agrees.id
    ]
    whole = ModelOracle(server, template_db, examples=0, tag="rw")
    try:
        statuses = []
        for m in (killed, agrees):  # as the sweep does: a Timeout is tried once more with twice the time
            verdict = whole.judge(m)
            statuses.append((whole.judge(m, factor=2.0) if verdict.status == "Timeout" else verdict).status)
        assert statuses == ["Killed", "Survived"]
    finally:
        whole.close()


def test_a_table_written_in_a_rolled_back_savepoint_counts_as_written(db_url: str) -> None:
    """The comparison of states reads only the tables either run wrote: PostgreSQL must count
    the rows of a savepoint that was rolled back, and a table nobody wrote must not count."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("set track_counts = on")
        conn.execute("begin")
        before = touches(conn)
        conn.execute("savepoint s")
        conn.execute("select engine.create_flow('touched')")
        conn.execute("rollback to savepoint s")
        after = touches(conn)
        assert "engine.flows" in written(before, after)
        assert written(after, touches(conn)) == set()
        conn.execute("rollback")


def test_a_replay_where_the_candidate_is_red_kills_nothing(server: Server, template_db: str) -> None:
    """A part of the histories the candidate itself fails cannot kill a mutant: RuntimeError."""
    oracle = ModelOracle(server, template_db, examples=0, tag="red")
    try:
        oracle.baselines["tour:step"], oracle.candidate_passed["tour:step"] = 1.0, False
        verdict = oracle.judge(_one("function engine.v2_claim_all", "ConditionToFalse"), part="tour:step")
        assert verdict.status == "RuntimeError" and "candidate itself is red" in verdict.detail, verdict
    finally:
        oracle.close()
