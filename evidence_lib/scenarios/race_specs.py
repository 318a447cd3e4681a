"""The four races of the v2 protocol, each with both orders, as isolation-style specs.

double_claim            two workers claim one delivery: one grant, one empty result
settle_vs_takeover      settlement first: takeover finds nothing to revoke;
                        takeover first: the old settlement is stale
two_reconcilers         two reconcilers on one dirty run: B created and queued once
settle_vs_generation    a settlement landing while a reconcile holds the old generation
                        re-dirties the run; nothing is marked processed wrongly
Every check reads the database back.
"""

from __future__ import annotations

from typing import Any

from evidence_lib.engine import v2
from evidence_lib.engine.flows import QueueMode
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.ab_flow import read_step_message
from evidence_lib.harness.race import Check, Permutation, Race, RaceContext, SessionSpec, Step
from evidence_lib.harness.waits import wait_for_lease_expiry
from evidence_lib.pg.db import Conn
from evidence_lib.scenarios.race_setup import (
    ask,
    claim_a,
    claims_of,
    show_grant,
    show_receipt,
    show_report,
    start_race_run,
)

Result = tuple[bool, str]


# -- double claim ------------------------------------------------------------------------------


def _double_claim_setup(mode: QueueMode) -> Any:
    def setup(ctx: RaceContext) -> None:
        with start_race_run(ctx, mode) as conn:
            ctx.data["msg_a"] = read_step_message(conn, ctx.data["flow"], "A", ctx.data["run"])

    return setup


def _claim_step(name: str) -> Step:
    return Step(
        name,
        "select * from engine.v2_claim(:run, 'A', :queue_a, array[:msg_a])",
        lambda conn, ctx: v2.claim(conn, ctx.data["run"], "A", ctx.data["queue_a"], ctx.data["msg_a"]),
        show_grant,
    )


def _exactly_one_grant(ctx: RaceContext) -> Result:
    seen = [ctx.results.get(n) for n in ("w1_claim", "w2_claim")]
    grants = [g for g in seen if g is not None]
    return len(grants) == 1 and not ctx.errors, f"client saw {len(grants)} grant(s)"


def _one_claim_row(ctx: RaceContext) -> Result:
    claims = claims_of(ctx)
    attempts = ask(
        ctx,
        "select attempts_count from engine.step_tasks where run_id = %s and step_slug = 'A'",
        ctx.data["run"],
    )
    return (
        len(claims) == 1 and claims[0][1] == "current" and attempts == 1,
        f"{len(claims)} claim row(s), attempts_count {attempts}",
    )


def _vt_equals_lease(ctx: RaceContext) -> Result:
    [(_claim, _, _, lease)] = claims_of(ctx)[-1:]
    vt = ask(ctx, f"select vt from pgmq.q_{ctx.data['queue_a']} where msg_id = %s", ctx.data["msg_a"])
    return vt == lease, f"vt {vt} vs lease {lease}"


def double_claim(mode: QueueMode = "flow") -> Race:
    checks = [
        Check("exactly_one_grant", _exactly_one_grant),
        Check("one_claim_row", _one_claim_row),
        Check("vt_equals_lease_horizon", _vt_equals_lease),
    ]
    hook = ["claim.before_guarded_update"]
    return Race(
        f"double_claim[{mode}]",
        "two sessions claim one delivery of A",
        _double_claim_setup(mode),
        {
            "w1": SessionSpec([_claim_step("w1_claim")], hook),
            "w2": SessionSpec([_claim_step("w2_claim")], hook),
        },
        [
            Permutation(
                "w1 first", ["hold:claim.before_guarded_update", "w1_claim", "w2_claim", "release", "check"], checks
            ),
            Permutation(
                "w2 first", ["hold:claim.before_guarded_update", "w2_claim", "w1_claim", "release", "check"], checks
            ),
        ],
    )


# -- settlement vs takeover --------------------------------------------------------------------


def _expired_claim_setup(mode: QueueMode) -> Any:
    def setup(ctx: RaceContext) -> None:
        with start_race_run(ctx, mode, timeout=1) as conn:
            claim_a(ctx, conn)
            wait_for_lease_expiry(conn, ctx.data["claim_1"])

    return setup


def _settle_first_checks() -> list[Check]:
    def accepted(ctx: RaceContext) -> Result:
        outcome = ask(ctx, "select outcome from engine.task_settlements where claim_id = %s", ctx.data["claim_1"])
        status = ask(ctx, "select status from engine.step_tasks where run_id = %s and step_slug = 'A'", ctx.data["run"])
        return outcome == "completed" and status == "completed", f"settlement {outcome}, task {status}"

    def nothing_revoked(ctx: RaceContext) -> Result:
        states = [c[1] for c in claims_of(ctx)]
        losses = ask(
            ctx,
            "select infrastructure_losses from engine.step_tasks where run_id = %s and step_slug = 'A'",
            ctx.data["run"],
        )
        err = ctx.errors.get("op_take_over")
        refused = err is not None and err.sqlstate == SqlState.NOT_CLAIMABLE
        return states == ["settled"] and losses == 0 and refused, f"claims {states}, losses {losses}"

    return [
        Check("settlement_accepted", accepted),
        Check("takeover_found_nothing_to_revoke", nothing_revoked),
    ]


def _takeover_first_checks() -> list[Check]:
    def revoked_and_replaced(ctx: RaceContext) -> Result:
        claims = claims_of(ctx)
        ok = (
            len(claims) == 2
            and claims[0][1] == "revoked"
            and claims[0][2] == claims[1][0]
            and claims[1][1] == "current"
        )
        losses = ask(
            ctx,
            "select infrastructure_losses from engine.step_tasks where run_id = %s and step_slug = 'A'",
            ctx.data["run"],
        )
        return ok and losses == 1, f"claims {[c[1] for c in claims]}, losses {losses}"

    def settlement_stale(ctx: RaceContext) -> Result:
        receipt = ctx.results.get("w1_settle")
        rows = ask(ctx, "select count(*) from engine.task_settlements where run_id = %s", ctx.data["run"])
        status = ask(ctx, "select status from engine.step_tasks where run_id = %s and step_slug = 'A'", ctx.data["run"])
        verdict = getattr(receipt, "verdict", None)
        return (
            verdict == "stale" and rows == 0 and status == "started",
            f"verdict {verdict}, settlements {rows}, task {status}",
        )

    def vt_moved(ctx: RaceContext) -> Result:
        lease = claims_of(ctx)[-1][3]
        vt = ask(ctx, f"select vt from pgmq.q_{ctx.data['queue_a']} where msg_id = %s", ctx.data["msg_a"])
        return vt == lease, f"vt {vt} vs new lease {lease}"

    return [
        Check("old_claim_revoked_and_replaced", revoked_and_replaced),
        Check("old_settlement_is_stale", settlement_stale),
        Check("vt_moved_to_the_new_horizon", vt_moved),
    ]


def settle_vs_takeover(mode: QueueMode = "flow") -> Race:
    settle = Step(
        "w1_settle",
        "select * from engine.v2_settle(:claim_1, 'completed', '{\"a\": 1}')",
        lambda conn, ctx: v2.settle(conn, ctx.data["claim_1"], "completed", {"a": 1}),
        show_receipt,
    )
    take = Step(
        "op_take_over",
        "select * from engine.v2_take_over(:run, 'A', :claim_1, :queue_a, array[:msg_a])",
        lambda conn, ctx: v2.take_over(
            conn, ctx.data["run"], "A", ctx.data["claim_1"], ctx.data["queue_a"], ctx.data["msg_a"]
        ),
        show_grant,
    )
    return Race(
        f"settle_vs_takeover[{mode}]",
        "the expired claim's settlement races a controlled takeover",
        _expired_claim_setup(mode),
        {
            "w1": SessionSpec([settle], ["settle.after_run_lock"]),
            "op": SessionSpec([take], ["take_over.after_run_lock"]),
        },
        [
            Permutation(
                "settlement first",
                ["hold:settle.after_run_lock", "w1_settle", "op_take_over", "release", "check"],
                _settle_first_checks(),
            ),
            Permutation(
                "takeover first",
                ["hold:take_over.after_run_lock", "op_take_over", "w1_settle", "release", "check"],
                _takeover_first_checks(),
            ),
        ],
    )


# -- two reconcilers ---------------------------------------------------------------------------


def _settled_a_setup(mode: QueueMode) -> Any:
    def setup(ctx: RaceContext) -> None:
        with start_race_run(ctx, mode) as conn:
            grant = claim_a(ctx, conn)
            v2.settle(conn, grant.claim_id, "completed", {"a": 1})

    return setup


def _reconcile_step(name: str) -> Step:
    return Step(
        name,
        "select * from engine.v2_reconcile(:run)",
        lambda conn, ctx: v2.reconcile(conn, ctx.data["run"]),
        show_report,
    )


def _b_created_once(ctx: RaceContext) -> Result:
    tasks = ask(ctx, "select count(*) from engine.step_tasks where run_id = %s and step_slug = 'B'", ctx.data["run"])
    messages = ask(
        ctx,
        f"select count(*) from pgmq.q_{ctx.data['queue_b']} "
        "where message->>'run_id' = %s and message->>'step_slug' = 'B'",
        str(ctx.data["run"]),
    )
    actions = sorted(getattr(ctx.results.get(n), "actions", -1) for n in ("r1_reconcile", "r2_reconcile"))
    return (
        tasks == 1 and messages == 1 and actions == [0, 1],
        f"B tasks {tasks}, B messages {messages}, actions reported {actions}",
    )


def _caught_up(ctx: RaceContext) -> Result:
    with ctx.connect() as conn:
        work = v2.work_row(conn, ctx.data["run"])
    ok = work["processed_generation"] == work["requested_generation"] and work["health"] == "clean"
    return ok, f"requested {work['requested_generation']}, processed {work['processed_generation']}"


def two_reconcilers(mode: QueueMode = "flow") -> Race:
    checks = [Check("b_created_and_queued_once", _b_created_once), Check("work_caught_up", _caught_up)]
    hook = ["reconcile.after_work_lock"]
    return Race(
        f"two_reconcilers[{mode}]",
        "two reconcilers on one dirty run after A settled",
        _settled_a_setup(mode),
        {
            "r1": SessionSpec([_reconcile_step("r1_reconcile")], hook),
            "r2": SessionSpec([_reconcile_step("r2_reconcile")], hook),
        },
        [
            Permutation(
                "r1 first",
                ["hold:reconcile.after_work_lock", "r1_reconcile", "r2_reconcile", "release", "check"],
                checks,
            ),
            Permutation(
                "r2 first",
                ["hold:reconcile.after_work_lock", "r2_reconcile", "r1_reconcile", "release", "check"],
                checks,
            ),
        ],
    )


# -- settlement vs generation ------------------------------------------------------------------


def _b_claimed_setup(mode: QueueMode) -> Any:
    def setup(ctx: RaceContext) -> None:
        with start_race_run(ctx, mode) as conn:
            grant = claim_a(ctx, conn)
            v2.settle(conn, grant.claim_id, "completed", {"a": 1})
            v2.reconcile(conn, ctx.data["run"])
            msg_b = read_step_message(conn, ctx.data["flow"], "B", ctx.data["run"])
            grant_b = v2.claim(conn, ctx.data["run"], "B", ctx.data["queue_b"], msg_b)
            assert grant_b is not None
            ctx.data.update(claim_b=grant_b.claim_id, generation=1)

    return setup


def _read_work(conn: Conn, ctx: RaceContext) -> dict[str, Any]:
    return v2.work_row(conn, ctx.data["run"])


def _held_old_generation_checks() -> list[Check]:
    def reconcile_kept_its_generation(ctx: RaceContext) -> Result:
        report = ctx.results.get("r_reconcile")
        work = ctx.results.get("r_read_work") or {}
        ok = (
            getattr(report, "generation", None) == 1
            and work.get("requested_generation") == 2
            and work.get("processed_generation") == 1
        )
        return ok, f"reconcile held generation {getattr(report, 'generation', None)}; then work {work}"

    return [
        Check("settlement_redirtied_the_run", reconcile_kept_its_generation),
        Check("finally_caught_up", _caught_up),
        Check("run_completed", _run_completed),
    ]


def _run_completed(ctx: RaceContext) -> Result:
    status = ask(ctx, "select status from engine.runs where run_id = %s", ctx.data["run"])
    output = ask(ctx, "select output from engine.runs where run_id = %s", ctx.data["run"])
    return status == "completed" and output == "b", f"run {status}, output {output!r}"


def _settled_first_checks() -> list[Check]:
    def reconcile_saw_new_generation(ctx: RaceContext) -> Result:
        report = ctx.results.get("r_reconcile")
        ok = getattr(report, "generation", None) == 2 and getattr(report, "actions", None) == 1
        return ok, f"reconcile report {report}"

    return [
        Check("reconcile_processed_the_new_generation", reconcile_saw_new_generation),
        Check("finally_caught_up", _caught_up),
        Check("run_completed", _run_completed),
    ]


def settle_vs_generation(mode: QueueMode = "flow") -> Race:
    settle = Step(
        "w_settle",
        "select * from engine.v2_settle(:claim_b, 'completed', '\"b\"')",
        lambda conn, ctx: v2.settle(conn, ctx.data["claim_b"], "completed", "b"),
        show_receipt,
    )
    return Race(
        f"settle_vs_generation[{mode}]",
        "B's settlement lands while a reconcile holds generation 1",
        _b_claimed_setup(mode),
        {
            "r": SessionSpec(
                [
                    _reconcile_step("r_reconcile"),
                    Step(
                        "r_read_work",
                        "select * from engine.run_work where run_id = :run",
                        _read_work,
                        lambda w: f"requested {w['requested_generation']}, processed {w['processed_generation']}",
                    ),
                    _reconcile_step("r_reconcile_again"),
                ],
                ["reconcile.after_work_lock"],
            ),
            "w": SessionSpec([settle], ["settle.after_run_lock"]),
        },
        [
            Permutation(
                "reconcile holds the old generation",
                [
                    "hold:reconcile.after_work_lock",
                    "r_reconcile",
                    "w_settle",
                    "release",
                    "r_read_work",
                    "r_reconcile_again",
                    "check",
                ],
                _held_old_generation_checks(),
            ),
            Permutation(
                "settlement first",
                ["hold:settle.after_run_lock", "w_settle", "r_reconcile", "release", "check"],
                _settled_first_checks(),
            ),
        ],
    )


ALL = (double_claim, settle_vs_takeover, two_reconcilers, settle_vs_generation)


def all_races(modes: tuple[QueueMode, ...] = ("flow", "step")) -> list[Race]:
    return [make(mode) for mode in modes for make in ALL]
