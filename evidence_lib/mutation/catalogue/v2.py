"""Mutants of the v2 protocol: settlement verdicts and writes, claim eligibility, the guarded
update, takeover and reconciliation."""

from __future__ import annotations

from evidence_lib.mutation.controls import CLAIM, CONSISTENCY, SETTLE, Control, Edit, Target

SETTLED = "    update engine.task_claims as c set state = 'settled' where c.claim_id = v2_settle.claim_id;\n"
ELIGIBLE = "w.requested_generation = w.processed_generation and w.health = 'clean'"

V2_PROTOCOL: tuple[Control, ...] = (
    # -- settlement verdicts --------------------------------------------------------------------
    Control(
        "settle_replay_ignores_the_result",
        "CONTRACT 5 settle: conflict when a settlement exists with a different outcome or result",
        (
            Target("admission", "settlement_verdicts", ("settlement_verdict_conflict_writes_exactly_what_it_must",)),
            Target("model_check", "random_histories", ("no_counterexample_in_random_histories",), mode=None),
        ),
        edits=(Edit(SETTLE, "= (v2_settle.outcome, v2_settle.result)", "= (v2_settle.outcome, v_settlement.result)"),),
    ),
    Control(
        "settle_replay_writes_again",
        "CONTRACT 5 settle: replayed returns the recorded receipt and writes nothing",
        (Target("admission", "settlement_verdicts", ("settlement_verdict_replayed_writes_exactly_what_it_must",)),),
        edits=(
            Edit(
                SETTLE,
                "  if v_settlement.claim_id is not null then\n",
                "  if v_settlement.claim_id is not null then\n"
                "    update engine.task_settlements as s set settled_at = pg_catalog.clock_timestamp()\n"
                "     where s.claim_id = v2_settle.claim_id;\n",
            ),
        ),
    ),
    Control(
        "settle_accepts_a_revoked_claim",
        "CONTRACT 5 settle: stale when the claim was revoked by a takeover, writes nothing",
        (Target("admission", "stale_verdict", ("settlement_verdict_stale_writes_exactly_what_it_must",)),),
        edits=(Edit(SETTLE, "if v_claim.state = 'current' and", "if v_claim.state in ('current', 'revoked') and"),),
    ),
    Control(
        "settle_accepts_on_a_terminal_run",
        "CONTRACT 5 settle: terminal when the run or task is terminal for another reason, writes nothing",
        (Target("admission", "settlement_verdicts", ("settlement_verdict_terminal_writes_exactly_what_it_must",)),),
        edits=(Edit(SETTLE, " and v_run.status = 'started'\n", "\n"),),
    ),
    # -- the writes of an accepted settlement ---------------------------------------------------
    Control(
        "settle_does_not_archive_the_message",
        "CONTRACT 5 settle: accepted archives the claim's owned pair in the same transaction",
        (Target("ab_proof", "proof", ("run_finalized_by_reconciliation", CONSISTENCY)),),
        edits=(Edit(SETTLE, "    perform pgmq.archive(v_claim.queue_name, v_claim.message_id);\n", ""),),
    ),
    Control(
        "settle_does_not_bump_the_generation",
        "CONTRACT 5 settle: accepted sets requested_generation + 1 (the run becomes dirty)",
        (Target("ab_proof", "proof", ("a_committed_with_no_reconciler",)),),
        edits=(
            Edit(
                SETTLE,
                """    update engine.run_work as w
       set requested_generation = w.requested_generation + 1
     where w.run_id = v_run_id
    returning w.* into v_work;
""",
                "",
            ),
        ),
    ),
    Control(
        "settle_leaves_the_claim_current",
        "CONTRACT 5 settle: accepted marks the claim settled",
        (Target("admission", "settlement_verdicts", ("settlement_verdict_accepted_writes_exactly_what_it_must",)),),
        edits=(
            Edit(
                SETTLE,
                "    update engine.task_claims as c set state = 'settled' where c.claim_id = v2_settle.claim_id;\n",
                "",
            ),
        ),
    ),
    Control(
        "settle_sends_b_before_reconciliation",
        "CONTRACT 5 settle: a completed settlement does nothing else (no dependent step); the old "
        "ab_proof gate looked for B only in a private queue and missed this in flow mode",
        (Target("ab_proof", "proof", ("a_committed_with_no_reconciler", CONSISTENCY)),),
        edits=(
            Edit(
                SETTLE,
                SETTLED,
                SETTLED + "    perform pgmq.send((select s.queue_name from engine.steps as s\n"
                "                        where s.flow_slug = v_run.flow_slug and s.deps_count > 0),\n"
                "                      engine._task_message('v2', v_run_id, 'B', 0));\n",
            ),
        ),
    ),
    # -- claim eligibility and the guarded update -----------------------------------------------
    Control(
        "claim_while_the_run_is_dirty",
        "CONTRACT 5 claim: eligible only when work is clean and caught up (requested = processed)",
        (Target("admission", "claim_eligibility", ("claim_refused_when_work_dirty",)),),
        edits=(
            Edit(CLAIM, "w.requested_generation = w.processed_generation and w.health = 'clean'", "w.health = 'clean'"),
        ),
    ),
    Control(
        "claim_in_backoff_or_attention",
        "CONTRACT 5 claim: eligible only when health is clean",
        (
            Target(
                "admission",
                "claim_eligibility",
                ("claim_refused_when_health_backoff", "claim_refused_when_health_attention"),
            ),
        ),
        edits=(
            Edit(
                CLAIM,
                ELIGIBLE,
                "w.requested_generation = w.processed_generation",
            ),
        ),
    ),
    Control(
        "claim_ignores_a_changed_definition",
        "CONTRACT 4: the live definition must match when claiming, else DR005 and nothing changes",
        (Target("admission", "claim_eligibility", ("claim_refused_when_definition_changed",)),),
        edits=(
            Edit(
                CLAIM,
                "  if v_run.definition_hash is distinct from v_live_hash then",
                "  if false and v_run.definition_hash is distinct from v_live_hash then",
            ),
        ),
    ),
    Control(
        "claim_without_row_locks",
        "CONTRACT 6 lock order: a claim locks run, work and task; the guarded update still picks "
        "one winner, so only the race's contention gate sees it (the old gate accepted any wait, "
        "the hook barrier's included, and passed)",
        (
            Target(
                "races", "double_claim", ("double_claim_contention_proven", "double_claim_transcript_matches_expected")
            ),
        ),
        edits=(
            Edit(
                CLAIM,
                "from engine.runs as r where r.run_id = v2_claim.run_id for no key update;",
                "from engine.runs as r where r.run_id = v2_claim.run_id;",
            ),
            Edit(CLAIM, "     for update of w;", "    ;"),
            Edit(CLAIM, "ss.status = 'started'\n     for update;", "ss.status = 'started';"),
            Edit(CLAIM, "     for update of t;", "    ;"),
        ),
    ),
    Control(
        "claim_grants_what_it_read_not_what_it_updated",
        "CONTRACT 2/5 claim: the winner comes from a guarded UPDATE ... RETURNING; a concurrent "
        "loser gets nothing and writes nothing (the pre-update snapshot defect, in v2)",
        (Target("races", "double_claim", ("double_claim", "double_claim_contention_proven")),),
        edits=(
            Edit(
                CLAIM,
                "from engine.runs as r where r.run_id = v2_claim.run_id for no key update;",
                "from engine.runs as r where r.run_id = v2_claim.run_id;",
            ),
            Edit(CLAIM, "     for update of w;", "    ;"),
            Edit(CLAIM, "ss.status = 'started'\n     for update;", "ss.status = 'started';"),
            Edit(CLAIM, "     for update of t;", "    ;"),
            Edit(CLAIM, "     and t.status = 'queued'\n  returning t.* into v_task;", "  returning t.* into v_task;"),
        ),
    ),
    # -- takeover ---------------------------------------------------------------------------------
    Control(
        "take_over_before_the_horizon",
        "CONTRACT 5 take over: refused before the lease horizon (DR007), nothing changes",
        (
            Target("admission", "isolation", ("refused: v2_take_over before the lease horizon",)),
            Target("model_check", "tour", ("the_tour_of_every_operation_agrees_with_the_model",)),
        ),
        edits=(Edit("0640_function_v2_take_over.sql", "if v_now < v_old.lease_expires_at then", "if false then"),),
    ),
    Control(
        "take_over_without_a_budget",
        "CONTRACT 3/5: one controlled takeover per task, then attention with the message kept",
        (Target("reconciliation", "takeover_attention", ("second_takeover_sets_attention_and_leaves_the_message",)),),
        edits=(
            Edit(
                "0640_function_v2_take_over.sql",
                "if v_task.infrastructure_losses >= v_limits.takeovers_per_task then",
                "if false then",
            ),
        ),
    ),
    # -- reconciliation ---------------------------------------------------------------------------
    Control(
        "reconcile_action_outside_its_subtransaction",
        "CONTRACT 5 reconcile: an error in an action rolls it back, is recorded durably and backs off",
        (Target("reconciliation", "rollback_and_restart", ("engine_error_recorded_with_backoff",)),),
        edits=(
            Edit(
                "0670_function_v2_reconcile.sql",
                """    exception when others then
      get stacked diagnostics v_sqlstate = returned_sqlstate, v_message = message_text,
                              v_context = pg_exception_context;
      v_failed := true;
    end;""",
                "    end;",
            ),
        ),
    ),
    Control(
        "reconcile_never_marks_the_generation_processed",
        "CONTRACT 5 reconcile: with no immediate action left it marks the locked generation processed",
        (Target("races", "two_reconcilers", ("two_reconcilers",)),),
        edits=(
            Edit(
                "0670_function_v2_reconcile.sql",
                "       set processed_generation = v_work.requested_generation,",
                "       set processed_generation = w.processed_generation,",
            ),
        ),
    ),
    Control(
        "reconcile_dispatches_b_again",
        "CONTRACT 5 reconcile: B is created and queued exactly once (idempotent dispatch)",
        (Target("races", "two_reconcilers", ("two_reconcilers",)),),
        edits=(
            Edit(
                "0660_function__v2_next_action.sql",
                "when b.status = 'created' and a.status = 'completed' then 'dispatch_b'",
                "when b.status <> 'completed' and a.status = 'completed' then 'dispatch_b'",
            ),
        ),
    ),
    Control(
        "reconcile_locks_work_before_the_run",
        "CONTRACT 6 lock order: run -> work -> step states; a reconcile that locks the work row first "
        "deadlocks with a settlement holding the run",
        (Target("races", "settle_vs_reconcile", ("no_deadlock",)),),
        edits=(
            Edit(
                "0670_function_v2_reconcile.sql",
                "  -- the run is locked at once; an unknown or v1 run is refused before anything is written\n",
                "  perform from engine.run_work as w where w.run_id = v2_reconcile.run_id for update;\n",
            ),
        ),
    ),
    Control(
        "prune_deletes_the_archive_of_a_live_run",
        "CONTRACT 6: pruning never touches a non-terminal v2 run (found by the race reconcile_vs_prune: "
        "the archive of a run waiting for its final reconcile was pruned)",
        (Target("races", "reconcile_vs_prune", (CONSISTENCY,)),),
        edits=(
            Edit(
                "0550_function_prune_data_older_than.sql",
                """        'delete from pgmq.%I as a where a.archived_at < $1 and not exists ('
        'select from engine.step_tasks as t where t.queue_name = $2 and t.message_id = a.msg_id)',""",
                """        'delete from pgmq.%I as a where a.archived_at < $1 or $2 is null',""",
            ),
        ),
    ),
)
