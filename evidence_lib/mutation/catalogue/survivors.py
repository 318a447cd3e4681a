"""Generated mutants that once survived the evidence and are now killed by a new or sharper gate:
each joins the negative-controls catalogue by its stable id (its patch is the generated one), so
every bundle re-checks it with the gate that kills it. `make mutation` found them; the gate named in
the target was added for them (docs/mutation.md, "Triage")."""

from __future__ import annotations

from evidence_lib.mutation.controls import Control, Target

CLOCK = Target("security", "refusals", ("the_test_clock_is_refused_to_a_login_that_is_not_superuser",), None)
NAME_LOCK = Target("queue_identity", "concurrent_definitions", ("colliding_definitions_serialize_on_the_name_lock",),
                   None)  # fmt: skip

TOUR = Target("model_check", "tour", ("the_tour_of_every_operation_agrees_with_the_model",))
V1_FAIL = Target("races", "v1_fail_vs_start_tasks", ("v1_fail_vs_start_tasks_transcript_matches_expected",))


def _scope(call: str) -> Target:
    """The lock-scope race of one v2 call (race_specs_scope): the second run's call never waits."""
    return Target("races", f"{call}s_of_two_runs", (f"{call}s_of_two_runs_transcript_matches_expected",))


def _v1_scope(name: str) -> Target:
    """A lock-scope race of the v1 writers (race_specs_scope_v1)."""
    return Target("races", name, (f"{name}_transcript_matches_expected",))


_OPERATOR = Target(
    "reconciliation", "operator_takeover", ("an_expired_claim_is_taken_over_once_and_its_result_settles",)
)

SURVIVORS: tuple[Control, ...] = (
    Control(
        "test_clock_obeyed_for_any_login",
        "engine._now: the test clock (engine.clock_offset) is obeyed only for a superuser session (migration 0012)",
        (CLOCK,),
        generated="370a7e1a3cba",
    ),
    Control(
        "test_clock_refused_with_another_sqlstate",
        "engine._now: a session that is not superuser setting the test clock is refused with 42501",
        (CLOCK,),
        generated="0299fc65f92a",
    ),
    Control(
        "queue_name_locked_under_another_key_space",
        "CONTRACT 1: colliding definitions serialize on a transaction advisory lock per name in key space 7100",
        (NAME_LOCK,),
        generated="8821e3dbb640",
    ),
    Control(
        "queue_name_lock_on_a_null_key",
        "CONTRACT 1: the name lock is on the name (hashtext of NULL takes no lock at all)",
        (NAME_LOCK,),
        generated="769a43f6621d",
    ),
    Control(
        "queue_name_holder_not_looked_up_in_steps",
        "CONTRACT 1: DR012 names who holds the name, a step's private queue of another flow included",
        (
            Target(
                "queue_identity",
                "concurrent_definitions",
                ("after_the_wait_the_same_flow_is_returned_and_a_collision_refused_naming_the_holder",),
                None,
            ),
        ),
        generated="fefb49586441",
    ),
    Control(
        "claim_options_of_the_flows_first_step",
        "CONTRACT 5 claim: a claim's lease and options are its own step's (the probe step_options: A 20 s, B 40 s)",
        (TOUR,),
        generated="22591aa44ceb",
    ),
    Control(
        "stale_receipt_carries_the_processed_generation",
        "CONTRACT 5 settle: stale and terminal receipts carry the run's current requested generation",
        (TOUR,),
        generated="be1996133ce7",
    ),
    Control(
        "listen_never_sweeps_a_gone_session",
        "docs/contract.md wake-ups: v2_listen sweeps the rows of sessions that are gone (else one takes a wake-up)",
        (TOUR,),
        generated="5056478aea5e",
    ),
    Control(
        "delivery_checks_the_step_before_the_protocol",
        "CONTRACT 8: a v2 call on a v1 run is refused DR015 before the step is looked at",
        (TOUR,),
        generated="f86dc648176f",
    ),
    Control(
        "fail_run_passes_over_a_locked_task",
        "CONTRACT 6 lock order: v1 _fail_run locks the unfinished tasks in order, then messages (no deadlock)",
        (V1_FAIL,),
        generated="a8f0226022a2",
    ),
    Control(
        "start_flow_skips_a_flow_being_redefined",
        "CONTRACT 6 lock order: v1 start_flow waits for the definition (the flow row, for share)",
        (Target("races", "v1_start_vs_add_step", ("v1_start_vs_add_step",)),),
        generated="6fe20cebdd30",
    ),
    Control(
        "sql_null_result_refused_with_another_sqlstate",
        "CONTRACT 5 settle: a result that is SQL NULL is refused DR009 (JSON null is a result), nothing written",
        (TOUR,),
        generated="5e525b667c55",
    ),
    Control(
        "accepted_receipt_names_the_run",
        "CONTRACT 5 settle: a receipt names the claim it settles (here the accepted one names the run)",
        (TOUR,),
        generated="8efdbf70d025",
    ),
    Control(
        "second_step_takes_a_foreign_queue",
        "CONTRACT 1: a step's queue that PGMQ already has, not the flow's own, is refused DR012 (here only for "
        "a flow's first step)",
        (TOUR,),
        generated="a2a08500e3ac",
    ),
    Control(
        "settle_locks_every_runs_step_states",
        "CONTRACT 6 lock order: v2_settle locks its own run's step states (the where removed: every run's)",
        (_scope("settle"),),
        generated="d62e27f2a295",
    ),
    Control(
        "claim_locks_the_step_state_of_every_run",
        "CONTRACT 6 lock order: v2_claim locks its own run's step state (the run_id predicate removed)",
        (_scope("claim"),),
        generated="d6bd8595691d",
    ),
    Control(
        "take_over_locks_the_step_state_of_every_run",
        "CONTRACT 6 lock order: v2_take_over locks its own run's step state (the run_id predicate removed)",
        (_scope("take_over"),),
        generated="b37d89d18e42",
    ),
    Control(
        "reconcile_locks_every_runs_step_states",
        "CONTRACT 6 lock order: v2_reconcile locks its own run's step states (the where removed: every run's)",
        (_scope("reconcile"),),
        generated="c97bf55f57f3",
    ),
    Control(
        "complete_task_locks_every_runs_step_states",
        "CONTRACT 6 lock order: complete_task locks its own run's step states (the run_id predicate removed)",
        (_v1_scope("v1_completes_of_two_runs"),),
        generated="e51db93b94d6",
    ),
    Control(
        "fail_run_locks_every_runs_unfinished_steps",
        "CONTRACT 6 lock order: _fail_run locks its own run's unfinished step states (the run_id predicate "
        "removed)",
        (_v1_scope("v1_fails_of_two_runs"),),
        generated="11c87eff643d",
    ),
    Control(
        "requeue_locks_every_started_run",
        "CONTRACT 6 lock order: requeue_stalled_tasks locks the stalled task's run (the run_id predicate removed: "
        "every started run)",
        (_v1_scope("v1_requeue_beside_a_run"),),
        generated="1e4aacf466e9",
    ),
    Control(
        "worker_followup_never_reconciles",
        "issue 33: a worker given reconcile_url reconciles the runs it settles (its follow-up loop skipping "
        "every batch leaves them dirty with no standalone reconciler)",
        (Target("reconciliation", "followup", ("runs_complete_with_the_workers_own_reconciler",)),),
        generated="ed2319da8fbc",
    ),
    Control(
        "operator_takeover_dry_run_inverted",
        "the controlled takeover an operator runs (CONTRACT 5, v2_take_over) lists with --dry-run and takes "
        "over without it (the condition inverted: the dry run takes over, the real run only lists)",
        (_OPERATOR,),
        generated="0f1731ca08c2",
    ),
)
