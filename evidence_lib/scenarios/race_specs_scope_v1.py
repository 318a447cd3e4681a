"""The scope of the v1 writers' locks: a v1 call on one run never waits for a call on another run.

The v1 writers lock their run, then its step states and tasks, with statements whose only effect
is the lock (`perform ... for update`). In one session such a statement changes nothing, so the
model cannot see a wrong predicate there; a second session can. Each spec holds one run's call in
an open transaction (every lock it took is kept until the commit) while a second session makes a
call on another run of the same flow; the second must complete at once. A lock wider than its run
(a lost `run_id` predicate, a `where` removed, `=` flipped to `<>`, `and` to `or`) makes it wait on
the first session, and the transcript says so. As in `race_specs_scope`, the one permutation
given is the one that matters.
"""

from __future__ import annotations

from typing import Any

from evidence_lib.engine import v1
from evidence_lib.engine.flows import Flow, QueueMode, compile_flow, route, with_step_queues
from evidence_lib.harness.ab_flow import identity
from evidence_lib.harness.isolation import Check, RaceContext, RaceSpec, Step
from evidence_lib.pg.db import Conn

Result = tuple[bool, str]
SLUG = "scope_v1"

COMPLETE = "select status from engine.complete_task(%(run)s, 'A', 0, '{\"a\": 1}'::jsonb)"
FAIL = "select status from engine.fail_task(%(run)s, 'A', 0, 'boom')"
REQUEUE = "select engine.requeue_stalled_tasks() as requeued"


def two_started(conn: Conn, mode: QueueMode) -> dict[str, Any]:
    """Two v1 runs of one flow A -> B (max_attempts 1, timeout 30 s), A started in each; the
    second run's A started 60 s ago (stalled: 60 > 30 + 2), the first's just now."""
    flow: Flow[str] = Flow(SLUG, max_attempts=1, base_delay=0, timeout=30)
    flow.add("A", identity)
    flow.add("B", identity, deps=["A"])
    defined = with_step_queues(flow) if mode == "step" else flow
    compile_flow(conn, defined)
    runs = [v1.start_flow(conn, SLUG, {"n": n}) for n in (1, 2)]
    queue = route(defined, "A")
    messages = [m.msg_id for m in v1.read_messages(conn, queue, 30, 10)]
    granted = v1.start_tasks(conn, queue, messages)
    assert len(granted) == 2, granted
    conn.execute("update engine.step_tasks set started_at = started_at - interval '60 seconds' "
                 "where run_id = %s and step_slug = 'A'", (runs[1],))  # fmt: skip
    return {"flow": SLUG, "run": runs[0], "run_2": runs[1]}


def _on_the_second_run(statement: str) -> str:
    return statement.replace("%(run)s", "%(run_2)s")


def _answered(*steps: str) -> Check:
    def check(ctx: RaceContext) -> Result:
        n = sum(1 for step in steps if ctx.results.get(step))
        return n == len(steps) and not ctx.errors, f"{n} of {len(steps)} answered, errors {sorted(ctx.errors)}"

    return Check("both_calls_answered", check)


def _status_of_a(first: str, second: str) -> Check:
    """What each run's A is afterwards: `first` in the first run, `second` in the other."""

    def check(ctx: RaceContext) -> Result:
        got = tuple(
            ctx.one("select status from engine.step_tasks where run_id = %s and step_slug = 'A'", ctx.params[run])
            for run in ("run", "run_2")
        )
        return got == (first, second) and not ctx.errors, f"A is {got[0]} in the first run, {got[1]} in the other"

    return Check(f"a_{first}_then_{second}", check)


def _spec(name: str, description: str, first: str, second: str, after: tuple[str, str]) -> RaceSpec:
    return RaceSpec(
        name=name,
        description=description,
        setup=two_started,
        sessions={
            "w1": (Step("w1_begin", "begin"), Step("w1_call", first, ("status",)), Step("w1_commit", "commit")),
            "w2": (Step("w2_call", second, ("requeued",) if second == REQUEUE else ("status",)),),
        },
        permutations=(("w1_begin", "w1_call", "w2_call", "w1_commit"),),
        checks=(_answered("w1_call", "w2_call"), _status_of_a(*after)),
        contention=False,  # the point: nobody waits
    )


ALL: tuple[RaceSpec, ...] = (
    _spec("v1_completes_of_two_runs", "complete_task of one v1 run in an open transaction, then of another run of "
          "the same flow: the second never waits for the first (its locks are its run's)",
          COMPLETE, _on_the_second_run(COMPLETE), ("completed", "completed")),
    _spec("v1_fails_of_two_runs", "the last failure of one v1 run's task (the run fails: _fail_run) in an open "
          "transaction, then of another run's: the second never waits for the first",
          FAIL, _on_the_second_run(FAIL), ("failed", "failed")),
    _spec("v1_requeue_beside_a_run", "complete_task of one v1 run in an open transaction while the stalled-task "
          "recovery takes the other run's stalled A: it never waits for the first run's locks",
          COMPLETE, REQUEUE, ("completed", "failed")),
)
