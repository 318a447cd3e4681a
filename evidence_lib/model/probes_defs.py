"""Probes of the definition functions, called directly: every refusal of create_flow, add_step and
delete_flow with its SQLSTATE, the boundaries of each limit (limit - 1, limit, limit + 1), the
private queue names and their truncation, name collisions (case, step queues, a foreign queue),
and definitions locked by an active v2 run. Each answer and the whole state after it are checked
against the model, as in every history."""

from __future__ import annotations

from typing import Protocol

from evidence_lib.model import ops, ops_more
from evidence_lib.model.reference import Model, Outcome


class Checker(Protocol):
    model: Model
    msg_ids: dict[tuple[str, str], int]

    def check(self, op: ops.Op) -> Outcome: ...

    def now(self) -> float: ...

    def advance(self, seconds: int) -> None: ...


def definitions(m: Checker) -> None:
    cf, step = ops_more.create_flow, ops_more.add_step
    # create_flow: each refusal, then the boundaries
    for slug in (None, "1bad", "bad-slug", "x" * 129, "x" * 128, "y" * 48):
        m.check(cf(slug))
    flow_options: tuple[tuple[int | None, ...], ...] = ((0, 1, 30), (None, 1, 30), (1, -1, 30), (1, None, 30),
                                                         (1, 1, 0), (1, 1, None))  # fmt: skip
    for ma, bd, to in flow_options:
        m.check(cf("opts", ma, bd, to))
    m.check(cf("opts", 1, 1, 30, "bogus"))
    m.check(cf("opts", 1, 1, 30, None))
    m.check(cf("z" * 47, 1, 0, 1))  # every boundary accepted: 47 characters, base_delay 0, timeout 1
    m.check(cf("Defs", 3, 2, 40, "flow"))
    m.check(cf("Defs", 3, 2, 40, "flow"))  # the same definition again: the row, nothing changed
    for ma, bd, to, mode in ((4, 2, 40, "flow"), (3, 3, 40, "flow"), (3, 2, 41, "flow"), (3, 2, 40, "step")):
        m.check(cf("Defs", ma, bd, to, mode))  # another definition of an existing flow: DR016
    m.check(cf("DEFS", 3, 2, 40, "flow"))  # the same queue name in another case: DR012
    # add_step: each refusal, then the boundaries
    m.check(step("nope", "a"))
    for bad in (None, "1a", "run"):
        m.check(step("Defs", bad))
    m.check(step("Defs", "a", [None]))
    m.check(step("Defs", "a", ["a"]))
    m.check(step("Defs", "a", ["x", "x"]))
    step_options: tuple[tuple[int | None, ...], ...] = ((0, None, None, None), (None, -1, None, None),
                                                         (None, None, 0, None), (None, None, None, -1))  # fmt: skip
    for step_option in step_options:
        m.check(step("Defs", "a", [], *step_option))
    m.check(step("Defs", "a", ["missing"]))
    m.check(step("Defs", "a", [], 1, 0, 1, 0))  # the boundaries are accepted
    m.check(step("Defs", "b", ["a"], None, None, 7, 3))
    m.check(step("Defs", "c", ["a", "b"]))
    for long in ("s" * 129, "s" * 128, "t" * 127):  # the slug rule's 128 characters, on a step of a plain flow
        m.check(step("Defs", long, ["c"]))
    m.check(step("Defs", "b", ["a"], None, None, 7, 3))  # the same step again: its row
    changes: tuple[tuple[list[str], tuple[int | None, ...]], ...] = (
        (["c"], (None, None, 7, 3)), (["a"], (2, None, 7, 3)), (["a"], (None, 1, 7, 3)), (["a"], (None, None, 8, 3)),
        (["a"], (None, None, 7, 4)))  # fmt: skip
    for deps, new in changes:
        m.check(step("Defs", "b", deps, *new))  # another definition of an existing step: DR016
    # private queue names: short, exactly 47, truncated with the step's index
    m.check(cf("Steps", 2, 1, 20, "step"))
    m.check(step("Steps", "First"))
    m.check(step("Steps", "s" * 38))  # steps__ + 38 = 45 characters
    m.check(step("Steps", "t" * 40))  # 47 characters: kept
    m.check(step("Steps", "u" * 41))  # 48: steps truncated, __3 appended
    m.check(cf("W" * 45, 1, 1, 20, "step"))
    m.check(step("W" * 45, "v"))  # 48 characters: truncated to 44 + __0
    # collisions: a flow whose name is another's private queue, a foreign queue, a step queue
    m.check(cf("steps__first", 1, 1, 20, "flow"))
    m.check(ops_more.foreign_queue("taken"))
    m.check(cf("Taken", 1, 1, 20, "flow"))
    m.check(cf("Other", 1, 1, 20, "step"))
    m.check(ops_more.foreign_queue("other__x"))
    m.check(step("Other", "x"))
    m.check(step("Other", "y"))
    m.check(cf("Other__y", 1, 1, 20, "flow"))
    m.check(ops.read("other__y"))
    # deleting: unknown, then a flow with its queues
    m.check(ops_more.delete_flow("nope"))
    m.check(ops_more.delete_flow("Other"))
    m.check(cf("Other", 1, 1, 20, "step"))  # its name is free again
    m.check(step("Other", "x"))  # the foreign queue other__x is not the flow's: still DR012
    m.check(step("Other", "w"))  # a first step: its queue is the flow's own
    m.check(ops_more.foreign_queue("other__v"))
    m.check(step("Other", "v", ["w"]))  # a second step meets a foreign queue: DR012 all the same


def locked_definitions(m: Checker, flow: str, run: str) -> None:
    """While `run` (a v2 run of `flow`) is active its definition cannot change (DR011)."""
    cf, step = ops_more.create_flow, ops_more.add_step
    defn = m.model.flows[flow]
    m.check(cf(flow, defn.max_attempts + 1, defn.base_delay, defn.timeout, defn.mode))
    m.check(step(flow, "late", [defn.steps[0]]))
    first = defn.step(defn.steps[0])
    m.check(step(flow, first.slug, list(first.deps), 2))
    m.check(cf(flow, defn.max_attempts, defn.base_delay, defn.timeout, defn.mode))  # unchanged: allowed
    m.check(ops_more.delete_flow(flow))
