"""The rules of the random histories that make group calls (`v2_claim_all`, `v2_settle_all`,
`v2_reconcile_all`): a few runs' claims, settlements or reconciles in one call, with the
duplicates, the stale claims and the refusals a real worker's group can hold."""

from __future__ import annotations

from collections import Counter
from typing import Any

import hypothesis.strategies as st
from hypothesis.stateful import precondition, rule

from evidence_lib.model import ops_groups
from evidence_lib.model.ops import Op
from evidence_lib.model.reference import Model, Outcome

RESULTS: tuple[Any, ...] = (0, None, {"ok": 1}, "done")
GROUPS = 2  # group calls of each kind per history: the single calls stay the bulk of every history


class GroupRules:
    """Mixed into the engine's state machine (which provides `check`, `model` and the ids)."""

    model: Model
    msg_ids: dict[tuple[str, str], int]
    sent: dict[str, tuple[str, Any]]
    calls: Counter[str]

    def check(self, op: Op) -> Outcome:
        raise NotImplementedError

    @precondition(lambda self: bool(self.model.runs) and self.calls["claim_group"] < GROUPS)
    @rule(data=st.data(), size=st.integers(1, 3), variant=st.sampled_from(["right", "right", "one wrong id"]))
    def claim_group(self, data: st.DataObject, size: int, variant: str) -> None:
        self.calls["claim_group"] += 1
        items: list[ops_groups.ClaimItem] = []
        for _ in range(size):
            run = data.draw(st.sampled_from(list(self.model.runs)), label="run")
            flow = self.model.flows[self.model.runs[run].flow]
            step = data.draw(st.sampled_from(flow.steps), label="step")
            msg = self.msg_ids.get((run, step))
            items.append((run, step, flow.queues[step], msg, msg))
        if variant == "one wrong id":
            run, step, queue, _, msg = items[-1]
            items[-1] = (run, step, queue, (msg or 0) + 1000, msg)
        op = ops_groups.claim_all(items, variant)
        op.meta["variant"] = variant
        self.check(op)

    @precondition(lambda self: bool(self.model.claims) and self.calls["settle_group"] < GROUPS)
    @rule(data=st.data(), size=st.integers(1, 3), variant=st.sampled_from(["fresh", "replay", "one bad outcome"]))
    def settle_group(self, data: st.DataObject, size: int, variant: str) -> None:
        self.calls["settle_group"] += 1
        items: list[ops_groups.SettleItem] = []
        for _ in range(size):
            claim_id = data.draw(st.sampled_from(list(self.model.claims)), label="claim")
            outcome, result = data.draw(st.sampled_from(["completed", "completed", "failed"]), label="outcome"), \
                data.draw(st.sampled_from(RESULTS), label="result")  # fmt: skip
            if variant == "replay" and claim_id in self.sent:
                outcome, result = self.sent[claim_id]
            items.append((claim_id, outcome, result))
        if variant == "one bad outcome":
            claim_id, _, result = items[0]
            items[0] = (claim_id, "done", result)
        op = ops_groups.settle_all(items, variant)
        op.meta["variant"] = variant
        answer = self.check(op)
        if answer.kind != "value":
            return
        for (claim_id, outcome, result), (kind, value) in zip(items, answer.value[1], strict=True):
            if kind == "value" and value[0] == "accepted":
                self.sent.setdefault(claim_id, (outcome, result))

    @precondition(lambda self: bool(self.model.runs) and self.calls["reconcile_group"] < GROUPS)
    @rule(data=st.data(), size=st.integers(1, 3), max_actions=st.sampled_from([1, 8, 8, 0]))
    def reconcile_group(self, data: st.DataObject, size: int, max_actions: int) -> None:
        self.calls["reconcile_group"] += 1
        runs = [data.draw(st.sampled_from(list(self.model.runs)), label="run") for _ in range(size)]
        self.check(ops_groups.reconcile_all(runs, max_actions))
