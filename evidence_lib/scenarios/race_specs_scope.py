"""The scope of the v2 calls' locks: a call on one run never waits for a call on another run.

Each spec holds one run's call in an open transaction (every lock it took is kept until the
commit) while a second session makes the same call on another run of the same flow; the second
must complete at once. A lock wider than its run (a lost `run_id` predicate, a `where` removed, a
comparison flipped) makes it wait on the first session, and the transcript says so. Nothing
orders the sessions but the transaction: the one permutation given is the one that matters.
"""

from __future__ import annotations

from typing import Any

from evidence_lib.engine import v2
from evidence_lib.engine.flows import QueueMode
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.isolation import Check, RaceContext, RaceSpec, Step
from evidence_lib.pg.db import Conn
from evidence_lib.scenarios import race_setups as s
from evidence_lib.scenarios.race_specs import CLAIM, LATER, RECONCILE, REPORT, SETTLE_A, TAKE_OVER, Result

SECOND = {"run": "run_2", "msg_a": "msg_a_2", "claim_1": "claim_2"}


def _on_the_second_run(statement: str) -> str:
    for first, second in SECOND.items():
        statement = statement.replace(f"%({first})s", f"%({second})s")
    return statement


def two_read(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    """Two v2 runs of one flow, A's message of each reserved by a worker's read."""
    p = s.read_a(conn, mode)
    flow = define_ab(conn, s.SLUG, mode, timeout=1)
    other = v2.start_run(conn, s.SLUG, {"n": 2})
    return p | {"run_2": other, "msg_a_2": read_step_message(conn, flow, "A", other)}


def two_claimed(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    """Two v2 runs of one flow, A claimed in each."""
    p = two_read(conn, mode)
    pairs = (("run", "msg_a"), ("run_2", "msg_a_2"))
    grants = [v2.claim(conn, p[run], "A", p["queue_a"], p[msg]) for run, msg in pairs]
    assert grants[0] is not None and grants[1] is not None
    return p | {"claim_1": grants[0].claim_id, "claim_2": grants[1].claim_id}


def _rows(*names: str) -> Check:
    def check(ctx: RaceContext) -> Result:
        n = s.rows_of(ctx, *names)
        return n == len(names) and not ctx.errors, f"{n} of {len(names)} answered, errors {sorted(ctx.errors)}"

    return Check("both_runs_answered", check)


def _spec(call: str, statement: str, columns: tuple[str, ...], setup: Any, *, later: bool = False,
          also: tuple[Check, ...] = ()) -> RaceSpec:  # fmt: skip
    first, second = f"w1_{call}", f"w2_{call}"
    return RaceSpec(
        name=f"{call}s_of_two_runs",
        description=f"v2_{call} of one run in an open transaction, then of another run of the same flow: "
        "the second never waits for the first (its locks are its run's)",
        setup=setup,
        sessions={
            "w1": (Step("w1_begin", "begin"), Step(first, statement, columns), Step("w1_commit", "commit")),
            "w2": (Step(second, _on_the_second_run(statement), columns),),
        },
        settings={"w1": LATER, "w2": LATER} if later else {},
        permutations=(("w1_begin", first, second, "w1_commit"),),
        checks=(_rows(first, second), *also),
        contention=False,  # the point: nobody waits
    )


def _reconciled(ctx: RaceContext) -> Result:
    tasks = ctx.one("select count(*) from engine.step_tasks where step_slug = 'B'")
    dirty = ctx.one("select count(*) from engine.run_work where requested_generation > processed_generation")
    ok = tasks == 2 and dirty == 0 and not ctx.errors
    return ok, f"B tasks {tasks}, dirty runs {dirty}, errors {sorted(ctx.errors)}"


ALL: tuple[RaceSpec, ...] = (
    _spec("claim", CLAIM, ("claim_id",), two_read),
    _spec("settle", SETTLE_A, ("verdict",), two_claimed),
    _spec("take_over", TAKE_OVER, ("claim_id",), two_claimed, later=True),
    _spec("reconcile", RECONCILE, REPORT, s.two_settled, also=(Check("b_created_in_each_run", _reconciled),)),
)
