"""Races of the v1 engine.

`v1_start_vs_add_step`: a run starts while its flow is being redefined; start_flow waits for the
definition (a generated mutant that skipped the locked flow row, `for share skip locked`, answered
"unknown flow").

`v1_fail_vs_start_tasks`: the last failure of one task fails the run and terminalizes every
unfinished task of it (`_fail_run`) while a v1 worker is starting sibling tasks. `start_tasks`
locks the task row without the run's lock, so the failure must wait for that worker's
transaction and then terminalize what it started. `_fail_run` first locks the unfinished tasks in
the order (step_slug, task_index), then their messages: a failure that passed over the task the
worker holds (`for update skip locked`, a generated mutant that once survived) locks the next one
ahead of it and then waits for the held task's message, while the worker waits for that next task:
a deadlock."""

from __future__ import annotations

from typing import Any

from evidence_lib.engine import v1
from evidence_lib.engine.flows import AnyFlow, Flow, QueueMode, compile_flow, route, with_step_queues
from evidence_lib.harness.ab_flow import identity
from evidence_lib.harness.isolation import Check, RaceContext, RaceSpec, Step
from evidence_lib.pg.db import Conn

Result = tuple[bool, str]
SLUG = "race_v1"

START_B = "select step_slug from engine.start_tasks(%(queue_b)s, array[%(msg_b)s]::bigint[])"
START_C = "select step_slug from engine.start_tasks(%(queue_c)s, array[%(msg_c)s]::bigint[])"
FAIL_A = "select status from engine.fail_task(%(run)s, 'A', 0, 'boom')"


def _roots(conn: Conn, mode: QueueMode, *steps: str) -> AnyFlow:
    """A v1 flow of independent root steps (max_attempts 1), compiled in `mode`."""
    flow: Flow[str] = Flow(SLUG, max_attempts=1, base_delay=1, timeout=30)
    for step in steps:
        flow.add(step, identity)
    defined = with_step_queues(flow) if mode == "step" else flow
    compile_flow(conn, defined)
    return defined


def three_roots_a_started(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    """A v1 run of three roots A, B and C (max_attempts 1): A started by a worker; B's and C's
    messages read by another worker, their tasks still queued."""
    defined = _roots(conn, mode, "A", "B", "C")
    run = v1.start_flow(conn, SLUG, {"n": 1})
    for queue in {route(defined, step) for step in ("A", "B", "C")}:  # flow mode: one queue, one read
        v1.read_messages(conn, queue, 30, 10)
    msg: dict[str, int] = dict(
        conn.execute("select step_slug, message_id from engine.step_tasks where run_id = %s", (run,)).fetchall()
    )
    granted = v1.start_tasks(conn, route(defined, "A"), [msg["A"]])
    assert len(granted) == 1
    return {"run": run, "queue_b": route(defined, "B"), "msg_b": msg["B"], "queue_c": route(defined, "C"),
            "msg_c": msg["C"]}  # fmt: skip


def nothing_unfinished_in_the_failed_run(ctx: RaceContext) -> Result:
    """The run failed, and no task of it is left queued or started, whichever came first."""
    status = ctx.one("select status from engine.runs where run_id = %s", ctx.params["run"])
    left = ctx.one(
        "select count(*) from engine.step_tasks where run_id = %s and status in ('queued', 'started')",
        ctx.params["run"],
    )
    return status == "failed" and left == 0 and not ctx.errors, (
        f"run {status}, {left} task(s) queued or started, errors {sorted(ctx.errors)}"
    )


FAIL_VS_START_TASKS = RaceSpec(
    name="v1_fail_vs_start_tasks",
    description="A's last failure fails the run while another v1 worker starts B, then C, in one open "
    "transaction: the failure waits for that worker (never a deadlock) and then terminalizes B and C",
    setup=three_roots_a_started,
    sessions={
        "w1": (
            Step("w1_begin", "begin"),
            Step("w1_start_b", START_B, ("step_slug",)),
            Step("w1_start_c", START_C, ("step_slug",)),
            Step("w1_commit", "commit"),
        ),
        "w2": (Step("w2_fail_a", FAIL_A, ("status",)),),
    },
    checks=(Check("nothing_unfinished_in_the_failed_run", nothing_unfinished_in_the_failed_run),),
)

ADD_B = "select step_slug from engine.add_step(%(flow)s, 'B', array['A'])"
START_FLOW = "select engine.start_flow(%(flow)s, '{}'::jsonb) is not null as started"


def one_step_a(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    """A v1 flow of one step A, no run yet."""
    _roots(conn, mode, "A")
    return {"flow": SLUG}


def the_run_has_the_committed_definition(ctx: RaceContext) -> Result:
    """The run started, with a step state for each step of the definition it saw: A alone if it
    started before the redefinition committed, A and B if after (never an error: it waited)."""
    states = ctx.one("select count(*) from engine.step_states where flow_slug = %s", ctx.params["flow"])
    remaining = ctx.one("select remaining_steps from engine.runs where flow_slug = %s", ctx.params["flow"])
    ok = not ctx.errors and states == remaining and states in (1, 2)
    return ok, f"{states} step state(s), remaining_steps {remaining}, errors {sorted(ctx.errors)}"


START_VS_ADD_STEP = RaceSpec(
    name="v1_start_vs_add_step",
    description="a v1 run starts while an open transaction adds step B to its flow: start_flow waits on the "
    "definition (the flow row, for share) and starts with the definition that committed",
    setup=one_step_a,
    sessions={
        "d1": (Step("d1_begin", "begin"), Step("d1_add_b", ADD_B, ("step_slug",)), Step("d1_commit", "commit")),
        "w1": (Step("w1_start_flow", START_FLOW, ("started",)),),
    },
    checks=(Check("the_run_has_the_committed_definition", the_run_has_the_committed_definition),),
)

ALL: tuple[RaceSpec, ...] = (FAIL_VS_START_TASKS, START_VS_ADD_STEP)
