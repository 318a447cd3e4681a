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


def _group(name: str, first: str, second: str) -> Step:
    runs = f"array[%({first})s, %({second})s]::uuid[]"
    return Step(name, f"select actions, processed, sqlstate from engine.v2_reconcile_all({runs})",
                ("actions", "processed", "sqlstate"))  # fmt: skip


def groups_without_deadlock(ctx: RaceContext) -> Result:
    """Both groups finished without an error (no deadlock), each run's B exists once, and the
    work caught up: one group reconciled both runs, the other found both processed."""
    rows = {n: ctx.results.get(n, []) for n in ("g1_all", "g2_all")}
    failed = sorted(str(r["sqlstate"]) for n in rows for r in rows[n] if r["sqlstate"] is not None)
    actions = sorted(sum(r["actions"] or 0 for r in rows[n]) for n in rows)
    b = ctx.one("select count(*) from engine.step_tasks where step_slug = 'B'")
    dirty = ctx.one("select count(*) from engine.run_work where requested_generation > processed_generation")
    ok = actions == [0, 2] and b == 2 and dirty == 0 and not failed and not ctx.errors
    return ok, (f"actions per group {actions}; B tasks {b}; dirty left {dirty}; items failed {failed}; "
                f"errors {sorted(ctx.errors)}")  # fmt: skip


RECONCILE_GROUPS_OVERLAP = RaceSpec(
    name="reconcile_groups_overlap",
    description="two reconcile groups name the same two due runs in opposite orders: each takes the runs in "
    "ascending run id, so the second waits for the first on the lower run and never holds the higher one (no "
    "deadlock)",
    setup=s.two_settled,
    sessions={
        "g1": (_group("g1_all", "run", "run_2"),),
        "g2": (_group("g2_all", "run_2", "run"),),
        "ctl": (Release("ctl_release", "reconcile.after_work_lock"),),
    },
    hooks={"g1": ("reconcile.after_work_lock",), "g2": ("reconcile.after_work_lock",)},
    holds=("reconcile.after_work_lock",),
    checks=(Check("both_groups_done_without_deadlock", groups_without_deadlock),),
)


ALL: tuple[RaceSpec, ...] = (RECONCILE_NEXT_SHARED, RECONCILE_NEXT_SPLIT, RECONCILE_GROUPS_OVERLAP)
