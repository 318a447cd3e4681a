"""Probes of the v1 cascade engine: a diamond flow with per-step options (a step timeout shorter
than the flow's, a start delay, retries with backoff), every writer's refusals, retries, stalled
recovery by the effective step timeout (the anchor's #621), failure cascades, completion outputs,
start_tasks' filters, and pruning. Time passes by ageing a task (a superuser write), never by
waiting."""

from __future__ import annotations

from evidence_lib.model import ops, ops_more
from evidence_lib.model.probes_defs import Checker

DIAMOND = "V1d"
UNKNOWN = "00000000-0000-4000-8000-00000000000f"


def _run(m: Checker, flow: str, input: object) -> str:
    before = set(m.model.runs)
    m.check(ops_more.start_flow(flow, input))
    (run,) = set(m.model.runs) - before
    return run


def _start(m: Checker, run: str, *steps: str, extra: list[int] | None = None, upper: bool = False) -> None:
    """start_tasks on the queue of the first step with the message ids of `steps` (and `extra`);
    the model is told every task of that queue whose message id was passed, as the engine sees."""
    flow = m.model.flows[m.model.runs[run].flow]
    queue = flow.queues[steps[0]]
    ids = [m.msg_ids[(run, s)] for s in steps if (run, s) in m.msg_ids] + (extra or [])
    owners = [o for o, mid in m.msg_ids.items() if mid in ids and o[0] in m.model.runs
              and o[1] in m.model.runs[o[0]].tasks and m.model.runs[o[0]].tasks[o[1]].queue == queue]  # fmt: skip
    m.check(ops_more.start_tasks(queue.upper() if upper else queue, ids, owners))


def diamond(m: Checker) -> None:
    cf, step = ops_more.create_flow, ops_more.add_step
    m.check(cf(DIAMOND, 2, 2, 30, "step"))
    m.check(step(DIAMOND, "A"))
    m.check(step(DIAMOND, "B", ["A"], None, None, 5))  # its own timeout: 5 s, not the flow's 30
    m.check(step(DIAMOND, "C", ["A"], None, 0, None, 7))  # starts 7 s after A completes, no backoff
    m.check(step(DIAMOND, "D", ["B", "C"], 1))
    crossing_flow(m)
    m.check(ops_more.start_flow("nope", {}))
    m.check(ops_more.start_flow(DIAMOND, None, sql_null=True))
    r1 = _run(m, DIAMOND, {"n": 1})
    _start(m, r1, "A", extra=[987654])
    _start(m, r1, "A")  # already started: nothing granted
    m.check(ops_more.complete_task(r1, "A", {"a": 1}))
    m.check(ops_more.complete_task(r1, "A", {"a": 2}))  # again: no change, the stored row
    _start(m, r1, "B")
    _start(m, r1, "C")
    m.check(ops_more.fail_task(r1, "B", "first try failed"))  # attempt 1 of 2: queued after 2 s
    _start(m, r1, "B")
    m.check(ops_more.age(r1, "B", 10))  # 10 s > 5 + 2 (the step's timeout); < 30 + 2 (the flow's)
    m.check(ops_more.age(r1, "C", 20))  # 20 s < 30 + 2: C is not stalled
    m.check(ops_more.requeue_stalled())  # B used its 2 attempts: failed, and so is the run
    m.check(ops_more.complete_task(r1, "C", {"c": 1}))  # the run failed: no change
    r2 = _run(m, DIAMOND, [1, 2])
    _start(m, r2, "A")
    m.check(ops_more.age(r2, "A", 33))  # 33 s > 30 + 2: stalled, with an attempt left
    m.check(ops_more.requeue_stalled())
    _start(m, r2, "A")
    m.check(ops_more.complete_task(r2, "A", {"a": [1]}))
    _start(m, r2, "B")
    _start(m, r2, "C")
    m.check(ops_more.complete_task(r2, "C", 0))
    m.check(ops_more.complete_task(r2, "B", ""))
    _start(m, r2, "D")
    m.check(ops_more.fail_task(r2, "D", "no retry for D"))  # D's own max_attempts is 1: the run fails
    r3 = _run(m, DIAMOND, None)
    for s in ("A",):
        _start(m, r3, s)
        m.check(ops_more.complete_task(r3, s, {"out": s}))
    _start(m, r3, "B", "C", upper=True)  # both ids, B's queue named in capitals: only B's queue counts
    _start(m, r3, "C")
    m.check(ops_more.complete_task(r3, "B", False))
    m.check(ops_more.complete_task(r3, "C", {}))
    _start(m, r3, "D")
    m.check(ops_more.complete_task(r3, "D", {"d": True}))  # the run completes with D's output
    m.check(ops_more.fail_task(r3, "D", "too late"))  # a completed task: no change
    refusals(m, r3)
    crossing_run(m)


CROSSING = "V1x"


def crossing_flow(m: Checker) -> None:
    """A second v1 flow whose step names meet the diamond's with other dependencies (its D
    depends on A, and E on D), defined before the diamond's runs: a dependency or a leaf looked
    up by step name alone, without the flow, is a different step there. Its options differ from
    each other (max_attempts 3, base_delay 1), so one read in place of the other shows."""
    m.check(ops_more.create_flow(CROSSING, 3, 1, 30, "step"))
    m.check(ops_more.add_step(CROSSING, "A"))
    m.check(ops_more.add_step(CROSSING, "D", ["A"]))
    m.check(ops_more.add_step(CROSSING, "E", ["D"]))


def crossing_run(m: Checker) -> None:
    """A's first failure is retried (3 attempts); a failure reported for A after it completed, on
    a run still started, changes nothing; then the run completes with E's output."""
    run = _run(m, CROSSING, {"x": 1})
    _start(m, run, "A")
    m.check(ops_more.fail_task(run, "A", "attempt 1 of 3"))
    _start(m, run, "A")
    m.check(ops_more.complete_task(run, "A", {"a": 1}))
    m.check(ops_more.fail_task(run, "A", "after it completed"))  # the run is started: no change
    for step in ("D", "E"):
        _start(m, run, step)
        m.check(ops_more.complete_task(run, step, {step.lower(): 1}))


def refusals(m: Checker, run: str) -> None:
    m.check(ops_more.complete_task(run, "A", None, sql_null=True))
    m.check(ops_more.complete_task(UNKNOWN, "A", {}))
    m.check(ops_more.complete_task(run, "Z", {}))
    m.check(ops_more.complete_task(run, "A", {}, index=1))
    m.check(ops_more.fail_task(UNKNOWN, "A", "x"))
    m.check(ops_more.fail_task(run, "Z", "x"))


def flat(m: Checker) -> None:
    """A plain-queue flow: one queue serves every step; a flow with no steps completes at once."""
    m.check(ops_more.create_flow("V1f", 1, 0, 10, "flow"))
    m.check(ops_more.add_step("V1f", "one"))
    m.check(ops_more.add_step("V1f", "two", ["one"], 3, 1, None, 2))
    run = _run(m, "V1f", "text input")
    _start(m, run, "one")
    m.check(ops_more.fail_task(run, "one", "the only attempt"))  # max_attempts 1: the run fails
    other = _run(m, "V1f", {"k": "v"})
    _start(m, other, "one")
    m.check(ops_more.complete_task(other, "one", 5))
    _start(m, other, "two")
    m.check(ops_more.fail_task(other, "two", "retry in 1 s"))  # its own max_attempts 3, base_delay 1
    _start(m, other, "two")
    m.check(ops_more.fail_task(other, "two", "retry in 2 s"))
    m.check(ops.read("v1f"))
    m.check(ops_more.create_flow("Empty", 1, 1, 10, "flow"))
    _run(m, "Empty", {"x": 1})


def pruning(m: Checker) -> None:
    for retention in (None, -1.0, 86_400.0):
        m.check(ops_more.prune(retention))
    m.check(ops_more.prune(0.0))


def two_roots(m: Checker) -> None:
    """A v1 flow with two roots: the second (step index 1) gets the run input as it is, and the
    step that joins them gets both outputs."""
    cf, step = ops_more.create_flow, ops_more.add_step
    m.check(cf("V1roots", 1, 0, 30, "flow"))
    m.check(step("V1roots", "A"))
    m.check(step("V1roots", "Z"))
    m.check(step("V1roots", "J", ["A", "Z"]))
    run = _run(m, "V1roots", {"two": "roots"})
    _start(m, run, "A", "Z")
    m.check(ops_more.complete_task(run, "Z", {"z": 1}))
    m.check(ops_more.complete_task(run, "A", {"a": 1}))
    _start(m, run, "J")
