"""The races of the v2 protocol as isolation specs: setup, sessions whose steps are the SQL
that runs, the hook points the controller holds, and checks that read the database back. No
permutations are given: every interleaving runs (see `harness.isolation`). A session named in
`settings` with `engine.clock_offset` sees the test clock 10 s ahead, so a lease has expired
for it (an operator's takeover) without waiting."""

from __future__ import annotations

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.isolation import Check, RaceContext, RaceSpec, Release, Step
from evidence_lib.scenarios import race_setups as s

Result = tuple[bool, str]
LATER = {"engine.clock_offset": "10 seconds"}

CLAIM = "select claim_id from engine.v2_claim(%(run)s, 'A', %(queue_a)s, array[%(msg_a)s]::bigint[])"
SETTLE_A = "select verdict from engine.v2_settle(%(claim_1)s, 'completed', '{\"a\": 1}')"
SETTLE_B = "select verdict from engine.v2_settle(%(claim_b)s, 'completed', '\"b\"')"
TAKE_OVER = (
    "select claim_id from engine.v2_take_over(%(run)s, 'A', %(claim_1)s, %(queue_a)s, array[%(msg_a)s]::bigint[])"
)
RECONCILE = "select actions, processed, health, run_status from engine.v2_reconcile(%(run)s)"
REPORT = ("actions", "processed", "health", "run_status")


def _claim(name: str) -> Step:
    return Step(name, CLAIM, ("claim_id",))


def _reconcile(name: str) -> Step:
    return Step(name, RECONCILE, REPORT)


# -- checks ------------------------------------------------------------------------------------


def one_grant_of(*steps: str) -> Check:
    def check(ctx: RaceContext) -> Result:
        n = s.rows_of(ctx, *steps)
        return n == 1 and not ctx.errors, f"{n} grant(s), errors {sorted(ctx.errors)}"

    return Check("exactly_one_grant", check)


def one_current_claim(ctx: RaceContext) -> Result:
    n = ctx.one("select count(*) from engine.task_claims where run_id = %s and state = 'current'", ctx.params["run"])
    attempts = ctx.one(
        "select attempts_count from engine.step_tasks where run_id = %s and step_slug = 'A'", ctx.params["run"]
    )
    return n == 1 and attempts == 1, f"{n} current claim(s), attempts_count {attempts}"


def vt_equals_lease(ctx: RaceContext) -> Result:
    vt = ctx.one(f"select vt from pgmq.q_{ctx.params['queue_a']} where msg_id = %s", ctx.params["msg_a"])
    lease = ctx.one(
        "select lease_expires_at from engine.task_claims where run_id = %s and state = 'current'", ctx.params["run"]
    )
    return vt == lease, f"vt {vt} vs lease {lease}"


def caught_up(ctx: RaceContext) -> Result:
    requested, processed, health = s.work(ctx)
    return requested == processed and health == "clean", f"requested {requested}, processed {processed}, {health}"


def b_once(ctx: RaceContext) -> Result:
    tasks, sent = s.b_counts(ctx)
    return tasks == 1 and sent == 1, f"B tasks {tasks}, B messages {sent}"


def actions_of(*steps: str, expected: list[int]) -> Check:
    def check(ctx: RaceContext) -> Result:
        seen = sorted(int(ctx.results[n][0]["actions"]) for n in steps if ctx.results.get(n))
        return seen == expected and not ctx.errors, f"actions {seen}, errors {sorted(ctx.errors)}"

    return Check("actions_done_once", check)


def settle_or_takeover(ctx: RaceContext) -> Result:
    """One of the two legal outcomes, never a mix."""
    settled = [r["verdict"] for r in ctx.results.get("w1_settle", [])]
    taken = s.rows_of(ctx, "op_take_over")
    revoked = ctx.one(
        "select count(*) from engine.task_claims where run_id = %s and state = 'revoked'", ctx.params["run"]
    )
    settlement_first = (
        settled == ["accepted"]
        and taken == 0
        and s.sqlstate(ctx, "op_take_over") == SqlState.NOT_CLAIMABLE
        and revoked == 0
    )
    takeover_first = taken == 1 and settled == ["stale"] and revoked == 1
    return settlement_first or takeover_first, f"settle {settled}, takeover grants {taken}, revoked {revoked}"


def generation_honest(ctx: RaceContext) -> Result:
    """Nothing is marked processed that a later settlement re-dirtied."""
    requested, processed, _ = s.work(ctx)
    status = ctx.one("select status from engine.runs where run_id = %s", ctx.params["run"])
    ok = processed <= requested and (status == "completed") == (processed == requested == 2)
    return ok, f"requested {requested}, processed {processed}, run {status}"


def dispatch_consistent(ctx: RaceContext) -> Result:
    requested, processed, _ = s.work(ctx)
    tasks, sent = s.b_counts(ctx)
    dispatched = tasks == 1 and sent == 1 and requested == processed == 1
    pending = tasks == 0 and sent == 0 and requested == 1 and processed == 0
    return dispatched or pending, f"B tasks {tasks}, messages {sent}, work {requested}/{processed}"


def takeover_only(ctx: RaceContext) -> Result:
    taken, actions = s.rows_of(ctx, "op_take_over"), ctx.results["r_reconcile"][0]["actions"]
    return taken == 1 and actions == 0 and not ctx.errors, f"takeover grants {taken}, reconcile actions {actions}"


def completed_once(ctx: RaceContext) -> Result:
    row = ctx.one("select status || ' ' || output::text from engine.runs where run_id = %s", ctx.params["run"])
    return row == 'completed "b"', f"run {row}"


def replayed_once(ctx: RaceContext) -> Result:
    verdicts = sorted(r["verdict"] for n in ("w1_settle", "w2_settle") for r in ctx.results.get(n, []))
    rows = ctx.one("select count(*) from engine.task_settlements where claim_id = %s", ctx.params["claim_1"])
    return verdicts == ["accepted", "replayed"] and rows == 1, f"verdicts {verdicts}, settlement rows {rows}"


def definition_kept(step: str, refused_with: str) -> Check:
    def check(ctx: RaceContext) -> Result:
        runs = ctx.one("select count(*) from engine.runs")
        steps = ctx.one("select count(*) from engine.steps where flow_slug = 'race'")
        run_first = runs == 1 and s.sqlstate(ctx, step) == SqlState.DEFINITION_LOCKED and steps == 2
        change_first = runs == 0 and s.sqlstate(ctx, "s_start") == refused_with
        return (
            run_first or change_first,
            f"runs {runs}, steps {steps}, {step}: {s.sqlstate(ctx, step)}, start: {s.sqlstate(ctx, 's_start')}",
        )

    return Check("the_run_keeps_its_definition", check)


def no_orphan(ctx: RaceContext) -> Result:
    run = ctx.params["run"]
    status = ctx.one("select status from engine.runs where run_id = %s", run)
    rows = ctx.one(
        "select (select count(*) from engine.step_tasks where run_id = %s) + "
        "(select count(*) from engine.run_work where run_id = %s)",
        run,
        run,
    )
    return (status == "completed" and rows == 3) or (status is None and rows == 0), f"run {status}, rows left {rows}"


# -- the specs ---------------------------------------------------------------------------------

BEFORE_UPDATE = "claim.before_guarded_update"

DOUBLE_CLAIM = RaceSpec(
    name="double_claim",
    description="two workers claim one delivery of A: one grant, the loser gets an empty set",
    setup=s.read_a,
    sessions={
        "w1": (_claim("w1_claim"),),
        "w2": (_claim("w2_claim"),),
        "ctl": (Release("ctl_release", BEFORE_UPDATE),),
    },
    hooks={"w1": (BEFORE_UPDATE,), "w2": (BEFORE_UPDATE,)},
    holds=(BEFORE_UPDATE,),
    checks=(
        one_grant_of("w1_claim", "w2_claim"),
        Check("one_claim_row", one_current_claim),
        Check("vt_equals_lease_horizon", vt_equals_lease),
    ),
)

SETTLE_VS_TAKEOVER = RaceSpec(
    name="settle_vs_takeover",
    description="a settlement and a takeover of an expired claim: accepted and nothing to revoke, or revoked and stale",
    setup=s.claimed_a,
    sessions={
        "w1": (Step("w1_settle", SETTLE_A, ("verdict",)),),
        "op": (Step("op_take_over", TAKE_OVER, ("claim_id",)),),
        "ctl": (
            Release("ctl_release_settle", "settle.after_run_lock"),
            Release("ctl_release_take_over", "take_over.after_run_lock"),
        ),
    },
    hooks={"w1": ("settle.after_run_lock",), "op": ("take_over.after_run_lock",)},
    holds=("settle.after_run_lock", "take_over.after_run_lock"),
    settings={"op": LATER},
    checks=(Check("one_legal_outcome", settle_or_takeover),),
)

CLAIM_VS_TAKEOVER = RaceSpec(
    name="claim_vs_takeover",
    description="a worker claims the message of a task whose claim an operator takes over: the claim grants nothing",
    setup=s.claimed_a,
    sessions={
        "w": (_claim("w_claim"),),
        "op": (Step("op_take_over", TAKE_OVER, ("claim_id",)),),
        "ctl": (
            Release("ctl_release_claim", "claim.after_run_lock"),
            Release("ctl_release_take_over", "take_over.after_run_lock"),
        ),
    },
    hooks={"w": ("claim.after_run_lock",), "op": ("take_over.after_run_lock",)},
    holds=("claim.after_run_lock", "take_over.after_run_lock"),
    settings={"op": LATER},
    checks=(one_grant_of("w_claim", "op_take_over"), Check("one_current_claim", one_current_claim)),
)

TWO_RECONCILERS = RaceSpec(
    name="two_reconcilers",
    description="two reconcilers on one dirty run after A settled: B created and queued once",
    setup=s.settled_a,
    sessions={
        "r1": (_reconcile("r1_reconcile"),),
        "r2": (_reconcile("r2_reconcile"),),
        "ctl": (Release("ctl_release", "reconcile.after_work_lock"),),
    },
    hooks={"r1": ("reconcile.after_work_lock",), "r2": ("reconcile.after_work_lock",)},
    holds=("reconcile.after_work_lock",),
    checks=(
        Check("b_created_and_queued_once", b_once),
        actions_of("r1_reconcile", "r2_reconcile", expected=[0, 1]),
        Check("work_caught_up", caught_up),
    ),
)

SETTLE_VS_GENERATION = RaceSpec(
    name="settle_vs_generation",
    description="B's settlement while a reconcile holds the old generation: dirty again, nothing processed wrongly",
    setup=s.claimed_b,
    sessions={
        "w": (Step("w_settle_b", SETTLE_B, ("verdict",)),),
        "r": (_reconcile("r_reconcile"),),
        "ctl": (Release("ctl_release", "reconcile.after_work_lock"),),
    },
    hooks={"r": ("reconcile.after_work_lock",)},
    holds=("reconcile.after_work_lock",),
    checks=(Check("nothing_processed_wrongly", generation_honest),),
)

SETTLE_VS_RECONCILE = RaceSpec(
    name="settle_vs_reconcile",
    description="A's settlement and a reconcile on one run: B dispatched once, or the run left dirty for the next call",
    setup=s.claimed_a,
    sessions={
        "w": (Step("w_settle", SETTLE_A, ("verdict",)),),
        "r": (_reconcile("r_reconcile"),),
        "ctl": (
            Release("ctl_release_settle", "settle.after_run_lock"),
            Release("ctl_release_reconcile", "reconcile.after_work_lock"),
        ),
    },
    hooks={"w": ("settle.after_run_lock",), "r": ("reconcile.after_work_lock",)},
    holds=("settle.after_run_lock", "reconcile.after_work_lock"),
    checks=(Check("dispatch_consistent_with_the_generation", dispatch_consistent),),
)

TAKEOVER_VS_RECONCILE = RaceSpec(
    name="takeover_vs_reconcile",
    description="a takeover and a reconcile on one run: the takeover grants, the reconcile writes nothing",
    setup=s.claimed_a,
    sessions={
        "op": (Step("op_take_over", TAKE_OVER, ("claim_id",)),),
        "r": (_reconcile("r_reconcile"),),
        "ctl": (
            Release("ctl_release_take_over", "take_over.after_run_lock"),
            Release("ctl_release_reconcile", "reconcile.after_work_lock"),
        ),
    },
    hooks={"op": ("take_over.after_run_lock",), "r": ("reconcile.after_work_lock",)},
    holds=("take_over.after_run_lock", "reconcile.after_work_lock"),
    settings={"op": LATER},
    checks=(Check("takeover_granted_reconcile_idle", takeover_only),),
)

RECONCILERS_AFTER_B = RaceSpec(
    name="reconcilers_after_b",
    description="two reconcilers after B completed: the run completes once, with B's result",
    setup=s.settled_b,
    sessions={
        "r1": (_reconcile("r1_reconcile"),),
        "r2": (_reconcile("r2_reconcile"),),
        "ctl": (Release("ctl_release", "reconcile.after_work_lock"),),
    },
    hooks={"r1": ("reconcile.after_work_lock",), "r2": ("reconcile.after_work_lock",)},
    holds=("reconcile.after_work_lock",),
    checks=(
        Check("run_completed_once", completed_once),
        actions_of("r1_reconcile", "r2_reconcile", expected=[0, 1]),
        Check("work_caught_up", caught_up),
    ),
)

TWO_RESUBMISSIONS = RaceSpec(
    name="two_resubmissions",
    description="two resubmissions of one settlement at once: one accepted, one replayed",
    setup=s.claimed_a,
    sessions={
        "w1": (Step("w1_settle", SETTLE_A, ("verdict",)),),
        "w2": (Step("w2_settle", SETTLE_A, ("verdict",)),),
        "ctl": (Release("ctl_release", "settle.after_run_lock"),),
    },
    hooks={"w1": ("settle.after_run_lock",), "w2": ("settle.after_run_lock",)},
    holds=("settle.after_run_lock",),
    checks=(Check("one_accepted_one_replayed", replayed_once),),
)

START = Step("s_start", "select count(*) as runs from engine.v2_start_run('race', '{}') as r", ("runs",))

START_VS_ADD_STEP = RaceSpec(
    name="start_vs_add_step",
    description="v2_start_run and add_step: the step is refused (DR011), or the start refuses the new shape",
    setup=s.defined,
    sessions={
        "s": (START,),
        "d": (Step("d_add_step", "select step_slug from engine.add_step('race', 'C', array['B'])", ("step_slug",)),),
        "ctl": (Release("ctl_release", "start.after_definition_lock"),),
    },
    hooks={"s": ("start.after_definition_lock",)},
    holds=("start.after_definition_lock",),
    checks=(definition_kept("d_add_step", SqlState.UNSUPPORTED_DEFINITION),),
)

START_VS_DELETE_FLOW = RaceSpec(
    name="start_vs_delete_flow",
    description="v2_start_run and delete_flow: the delete is refused (DR011), or the start finds no flow (DR014)",
    setup=s.defined,
    sessions={
        "s": (START,),
        "d": (Step("d_delete", "select 1 as deleted from engine.delete_flow('race')", ("deleted",)),),
        "ctl": (Release("ctl_release", "start.after_definition_lock"),),
    },
    hooks={"s": ("start.after_definition_lock",)},
    holds=("start.after_definition_lock",),
    checks=(definition_kept("d_delete", SqlState.UNKNOWN_OBJECT),),
)

RECONCILE_VS_PRUNE = RaceSpec(
    name="reconcile_vs_prune",
    description="the reconcile that completes a run and a prune: the run is kept or pruned whole, never half",
    setup=s.settled_b,
    sessions={
        "r": (_reconcile("r_reconcile"),),
        "p": (Step("p_prune", "select engine.prune_data_older_than('0 seconds') as pruned", ("pruned",)),),
        "ctl": (Release("ctl_release", "reconcile.after_work_lock"),),
    },
    hooks={"r": ("reconcile.after_work_lock",)},
    holds=("reconcile.after_work_lock",),
    checks=(Check("kept_or_pruned_whole", no_orphan),),
    contention=False,  # prune skips a run that is not terminal in its snapshot: nobody waits
)

THREE_SESSIONS = RaceSpec(
    name="three_sessions",
    description="two workers claim A while a reconciler visits the run: one grant, the reconcile writes nothing",
    setup=s.read_a,
    sessions={
        "w1": (_claim("w1_claim"),),
        "w2": (_claim("w2_claim"),),
        "r": (_reconcile("r_reconcile"),),
        "ctl": (Release("ctl_release", BEFORE_UPDATE),),
    },
    hooks={"w1": (BEFORE_UPDATE,), "w2": (BEFORE_UPDATE,)},
    holds=(BEFORE_UPDATE,),
    checks=(
        one_grant_of("w1_claim", "w2_claim"),
        Check("one_claim_row", one_current_claim),
        Check("work_caught_up", caught_up),
    ),
)

ALL: tuple[RaceSpec, ...] = (
    DOUBLE_CLAIM,
    SETTLE_VS_TAKEOVER,
    CLAIM_VS_TAKEOVER,
    TWO_RECONCILERS,
    SETTLE_VS_GENERATION,
    SETTLE_VS_RECONCILE,
    TAKEOVER_VS_RECONCILE,
    RECONCILERS_AFTER_B,
    TWO_RESUBMISSIONS,
    START_VS_ADD_STEP,
    START_VS_DELETE_FLOW,
    RECONCILE_VS_PRUNE,
    THREE_SESSIONS,
)
