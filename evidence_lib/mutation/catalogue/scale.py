"""Mutants of the additions for throughput at scale (migration 0015): wake-ups and the shared
reconcile (docs/contract.md, "Additions for throughput at scale")."""

from __future__ import annotations

from evidence_lib.mutation.controls import Control, Edit, Target

NOTIFY = "0366_function__notify_listeners.sql"
SETTLE_ALL = "0696_function_v2_settle_all.sql"
RECONCILE_ALL = "0698_function_v2_reconcile_all.sql"
TOUR = Target("model_check", "tour", ("the_tour_of_every_operation_agrees_with_the_model",))
START = "0610_function_v2_start_run.sql"
WAKE = "'engine_wake_' || v_pid"
KEPT = "  select l.pid into v_pid\n    from engine.listeners as l\n"
LONE_RUN = "a_lone_run_completes_on_wake_ups_not_the_fallback_poll"


def _wakeups(*gates: str) -> tuple[Target, ...]:
    return (Target("reconciliation", "wakeups", gates),)


SCALE: tuple[Control, ...] = (
    Control(
        "notify_wakes_nobody",
        "contract.md Wake-ups: the engine wakes one waiter per event (engine_wake_<pid>)",
        _wakeups(LONE_RUN),
        edits=(Edit(NOTIFY, f"    perform pg_catalog.pg_notify({WAKE}, _notify_listeners.channel);\n", "    null;\n"),),
    ),
    Control(
        "start_run_wakes_nobody",
        "contract.md Wake-ups: v2_start_run wakes a waiter of A's queue",
        _wakeups(LONE_RUN),
        edits=(Edit(START, "  perform engine._notify_listeners('engine_queue_' || v_a.queue_name);\n", ""),),
    ),
    Control(
        "wake_up_keeps_the_registration",
        "contract.md Wake-ups: the woken waiter's registration is consumed (a busy worker gets no NOTIFY)",
        _wakeups("a_wake_up_consumes_the_registration"),
        edits=(
            Edit(NOTIFY, "  delete from engine.listeners as l\n", KEPT),
            Edit(NOTIFY, "  returning l.pid into v_pid;\n", "  ;\n"),
        ),
    ),
    Control(
        "wake_up_goes_to_the_newest_waiter",
        "contract.md Wake-ups: the waiter woken is the one waiting longest",
        _wakeups("the_worker_waiting_longest_is_woken"),
        edits=(Edit(NOTIFY, "order by w.listening_since, w.pid", "order by w.listening_since desc, w.pid"),),
    ),
    # -- the group calls (issue 33, migration 0017) ---------------------------------------------
    Control(
        "reconcile_all_in_the_given_order",
        "contract.md Group calls: the items run in ascending run id, so two groups over the same runs never "
        "wait on each other in a cycle",
        (Target("races", "reconcile_groups_overlap", ("reconcile_groups_overlap",)),),
        edits=(Edit(RECONCILE_ALL, "     order by r.run_id, r.i\n", "     order by r.i\n"),),
    ),
    Control(
        "settle_all_without_a_subtransaction_per_item",
        "contract.md Group calls: each item is a subtransaction of its own; a refusal of one undoes no other",
        (TOUR,),
        edits=(
            Edit(SETTLE_ALL, "    begin\n      v_receipt := engine.v2_settle(", "    v_receipt := engine.v2_settle("),
            Edit(SETTLE_ALL, "    exception when others then\n      get stacked diagnostics v_state = "
                 "returned_sqlstate, v_text = message_text;\n    end;\n", ""),
        ),
    ),
)
