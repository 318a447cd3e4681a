"""The races of v2_reconcile_next (issue 26): reconcilers side by side share the due runs through
SKIP LOCKED on the run, the first lock of the order; none ever waits on another's run."""

from __future__ import annotations

from evidence_lib.harness.isolation import Check, RaceContext, RaceSpec, Release, Step
from evidence_lib.scenarios import race_setups as s
from evidence_lib.scenarios.race_specs import Result, b_once, caught_up

NEXT = "select run_id, actions, processed from engine.v2_reconcile_next(8)"


def _next(name: str) -> Step:
    return Step(name, NEXT, ("actions", "processed"))


def one_report_and_none(ctx: RaceContext) -> Result:
    """Exactly one reconciler reconciled the one due run; the other found nothing it could take."""
    reports = s.rows_of(ctx, "r1_next", "r2_next")
    return reports == 1 and not ctx.errors, f"{reports} report(s), errors {sorted(ctx.errors)}"


def each_run_once(ctx: RaceContext) -> Result:
    """Each of the two due runs was reconciled by exactly one of the reconcilers."""
    runs = sorted(str(r["run_id"]) for n in ("r1_next", "r2_next") for r in ctx.results.get(n, []))
    want = sorted(str(ctx.params[k]) for k in ("run", "run_2"))
    dirty = ctx.one("select count(*) from engine.run_work where requested_generation > processed_generation")
    return runs == want and dirty == 0 and not ctx.errors, f"reconciled {runs}; dirty left {dirty}"


RECONCILE_NEXT_SHARED = RaceSpec(
    name="reconcile_next_shared",
    description="two reconcilers take the next due run, the only one: one reconciles it, the other passes "
    "it over (skip locked) without waiting",
    setup=s.settled_a,
    sessions={
        "r1": (_next("r1_next"),),
        "r2": (_next("r2_next"),),
        "ctl": (Release("ctl_release", "reconcile.after_work_lock"),),
    },
    hooks={"r1": ("reconcile.after_work_lock",), "r2": ("reconcile.after_work_lock",)},
    holds=("reconcile.after_work_lock",),
    checks=(
        Check("one_reconciled_the_other_found_none", one_report_and_none),
        Check("b_created_and_queued_once", b_once),
        Check("work_caught_up", caught_up),
    ),
    contention=False,  # the point: no reconciler ever waits on another's run
)

RECONCILE_NEXT_SPLIT = RaceSpec(
    name="reconcile_next_split",
    description="two reconcilers and two due runs: each takes one (the held run is passed over), none waits",
    setup=s.two_settled,
    sessions={
        "r1": (_next("r1_next"),),
        "r2": (_next("r2_next"),),
        "ctl": (Release("ctl_release", "reconcile.after_work_lock"),),
    },
    hooks={"r1": ("reconcile.after_work_lock",), "r2": ("reconcile.after_work_lock",)},
    holds=("reconcile.after_work_lock",),
    checks=(Check("each_run_reconciled_once", each_run_once),),
    contention=False,
)


ALL: tuple[RaceSpec, ...] = (RECONCILE_NEXT_SHARED, RECONCILE_NEXT_SPLIT)
