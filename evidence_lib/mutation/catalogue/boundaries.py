"""Mutants at the engine's boundaries: v1 writers on v2 state, queue identity, the admission
envelope, privileges and the search path."""

from __future__ import annotations

from evidence_lib.mutation.controls import CLAIM, Control, Edit, Target

WORKER_REFUSED = "a_engine_worker_login_is_refused_everything_else_and_changes_nothing"
SAFE_PATH = "every_engine_function_searches_pg_catalog_first_and_pg_temp_last"

BOUNDARIES: tuple[Control, ...] = (
    # -- v1 writers on v2 state -------------------------------------------------------------------
    Control(
        "v1_report_writes_a_v2_run",
        "CONTRACT 6: v1 writers never write a row of a v2 run (DR010)",
        (
            Target(
                "admission",
                "isolation",
                ("refused: complete_task on a v2 task", "refused: fail_task on a v2 task"),
            ),
        ),
        edits=(Edit("0390_function__v1_report_run.sql", "  if v_run.protocol <> 'v1' then", "  if false then"),),
    ),
    # -- queue identity ---------------------------------------------------------------------------
    Control(
        "queue_names_compared_without_case_folding",
        "CONTRACT 1: names normalize lower-case; Foo and foo collide (DR012)",
        (Target("queue_identity", "naming", ("colliding_default_name_refused_without_writes",), None),),
        edits=(
            Edit(
                "0335_function__reserve_queue_name.sql",
                "  v_name text := pg_catalog.lower(_reserve_queue_name.queue_name);",
                "  v_name text := _reserve_queue_name.queue_name;",
            ),
        ),
    ),
    Control(
        "claim_matches_the_message_id_only",
        "CONTRACT 1/5: an equal numeric id in another queue never matches (DR004)",
        (Target("queue_identity", "identity", ("same_numeric_id_never_cross_claimed",), None),),
        edits=(
            Edit(
                "0620_function__v2_delivery.sql",
                """  if v_task_queue is distinct from _v2_delivery.queue_name
     or v_task_message""",
                "  if v_task_message",
            ),
            Edit(
                "0620_function__v2_delivery.sql",
                "\n     or v_route is distinct from _v2_delivery.queue_name then",
                " then",
            ),
        ),
    ),
    # -- the admission envelope -------------------------------------------------------------------
    Control(
        "start_run_admits_any_number_of_steps",
        "CONTRACT 3: exactly two steps, A -> B (DR001)",
        (Target("admission", "admission", ("refused: three steps",), None),),
        edits=(Edit("0610_function_v2_start_run.sql", "if v_steps <> v_limits.steps then", "if false then"),),
    ),
    Control(
        "start_run_ignores_the_input_size",
        "CONTRACT 3: run input at most 65 536 bytes (DR002)",
        (Target("admission", "admission", ("refused: input 65 537 bytes",), None),),
        edits=(Edit("0610_function_v2_start_run.sql", "if v_bytes > v_limits.input_max_bytes then", "if false then"),),
    ),
    # -- privileges and the search path ----------------------------------------------------------
    Control(
        "public_may_settle",
        "CONTRACT 6: nothing in schema engine is usable by PUBLIC",
        (Target("security", "privileges", ("public_holds_exactly_the_contract_privileges",), None),),
        statements="grant execute on function engine.v2_settle(uuid, text, jsonb) to public;",
    ),
    Control(
        "worker_role_may_reconcile",
        "CONTRACT 6: a login granted engine_worker cannot reconcile",
        (
            Target("security", "privileges", ("engine_worker_holds_exactly_the_contract_privileges",), None),
            Target(
                "security", "refusals", ("a_engine_worker_login_is_refused_everything_else_and_changes_nothing",), None
            ),
        ),
        statements="grant execute on function engine.v2_reconcile(uuid, integer) to engine_worker;",
    ),
    Control(
        "empty_search_path_in_v2_claim",
        "CONTRACT 6 (amended 2026-12-03): search_path = pg_catalog, pg_temp; with '' a caller's "
        "temporary domain runs with the owner's rights (issue 12)",
        (
            Target(
                "security", "search_path", ("every_engine_function_searches_pg_catalog_first_and_pg_temp_last",), None
            ),
            Target("security", "shadowing", ("shadowing_through_v2_claim_as_engine_worker_escalates_nothing",)),
        ),
        edits=(Edit(CLAIM, "set search_path = pg_catalog, pg_temp", "set search_path = ''"),),
    ),
)
