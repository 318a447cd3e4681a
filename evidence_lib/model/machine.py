"""Random histories against the real database: a Hypothesis state machine whose every rule calls
the engine on a real session, applies the same operation to the reference model, and compares
the answers and then the whole database state (engine rows and queue messages) with the model.

Each history runs on a fresh database cloned from the migrated candidate (`Bench`). A mismatch
raises `ModelMismatch` with the history so far; Hypothesis shrinks it to a minimal history, and
the checker reports that history's transcript with the seed that replays it.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, ClassVar

import hypothesis.strategies as st
import psycopg
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from psycopg.types.json import Jsonb

from evidence_lib.harness.faults import LostAckProxy
from evidence_lib.model import ops
from evidence_lib.model.bench import Bench, ModelMismatch, OutOfTime
from evidence_lib.model.concurrent import PAIRS, race
from evidence_lib.model.group_rules import GroupRules
from evidence_lib.model.observe import differences, snapshot
from evidence_lib.model.reference import Model, Outcome, Window
from evidence_lib.pg import db
from evidence_lib.pg.db import Conn, connect

SLUGS = ("m1", "M1", "m2")
RESULTS: tuple[Any, ...] = (0, False, "", [], {}, None, {"ok": 1}, "done")
BIG = {"pad": "x" * 70_000}
HUGE = {"pad": "x" * 270_000}


class EngineMachine(GroupRules, RuleBasedStateMachine):
    bench: ClassVar[Bench]

    def __init__(self) -> None:
        super().__init__()
        if self.bench.conn is not None:  # one session's open transaction: this history is a savepoint
            self.name, self.url = "", ""
            self.conn: Conn = self.bench.conn
            self.conn.execute("savepoint history")
        else:
            self.name = db.scratch_name("model")
            self.url = db.create_database(self.bench.server, self.name, template=self.bench.template)
            self.conn = connect(self.url, application_name="model")
        self.model = Model()
        self.offset = 0.0
        self.transcript: list[str] = []
        self.refused = False  # the last trial was a refusal the model expected
        self.msg_ids: dict[tuple[str, str], int] = {}
        self.sent: dict[str, tuple[str, Any]] = {}  # claim -> the settlement first sent for it
        self.proxy: LostAckProxy | None = None
        self.calls: Counter[str] = Counter()  # rule -> times run in this history (to keep noise rare)
        self.bench.histories += 1
        self.bench.last_transcript = self.transcript

    def teardown(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
        if self.bench.transactional:
            self.conn.execute("rollback to savepoint history")
            self.conn.execute("release savepoint history")
            return
        self.conn.close()
        db.drop_database(self.bench.server, self.name)

    # -- the checker -----------------------------------------------------------------------

    def now(self) -> float:
        return time.time() + self.offset

    def state_of(self, run: str | None) -> str:
        r = self.model.runs.get(run or "")
        if r is None:
            return "no run" if run is None else "unknown run"
        steps = "/".join(f"{s}:{v}" for s, v in r.steps.items())
        dirty = "dirty" if r.requested != r.processed else "caught up"
        return f"{r.status} {steps} {dirty} {r.health}"

    def check(self, op: ops.Op) -> Outcome:
        """Run `op` on the engine and on the model; the answers and the whole state must agree
        (with two model answers when the server's clock made the operation indeterminate)."""
        if self.bench.deadline is not None and time.monotonic() > self.bench.deadline:
            raise OutOfTime(f"the history ran past its deadline before {op.text}")
        if self.bench.observer is not None:
            self.bench.observer.before(self, op)
        before = self.state_of(op.run)
        real, agreed, seen, problems = self._judge(op)
        self._record(op, before, real)
        if self.bench.observer is not None:
            self.bench.observer.after(self, op)
        if problems:
            raise ModelMismatch(f"{op.text}: the engine answered {real.text()}; " + " || ".join(problems))
        if agreed is not None:  # None: a refusal the model expected; the state is what it was
            self.model = agreed
            self.learn_ids(seen)
        return real

    def trial(self, op: ops.Op) -> str:
        """Run `op` and judge it exactly as `check` does, changing nothing of this history (the
        model, the ids learned, the transcript): the caller undoes the database side with a
        savepoint. Returns the mismatch ("" when the engine agreed with the model). `refused`
        tells afterwards whether the engine refused the operation as the model expected (then
        PostgreSQL rolled the call back: it wrote nothing)."""
        real, agreed, _, problems = self._judge(op)
        self.refused = not problems and agreed is None
        return f"{op.text}: the engine answered {real.text()}; " + " || ".join(problems) if problems else ""

    def _judge(self, op: ops.Op) -> tuple[Outcome, Model | None, dict[str, Any], list[str]]:
        """(the engine's answer, the model that explains it, the state seen, the problems)."""
        lo = self.now()
        real, ids = op.real(self.conn)
        window: Window = (lo, self.now())
        candidates = []
        first = self.model.copy()
        candidates.append((op.apply(first, ids, window), first))
        if first.ambiguous:
            other = self.model.copy()
            other.force = {q: False for q in first.ambiguous}
            candidates.append((op.apply(other, ids, window), other))
        if real.kind == "error" and any(expected == real for expected, _ in candidates):
            return real, None, {}, []  # a refusal rolled back: PostgreSQL guarantees it wrote nothing
        seen = snapshot(self.conn)
        problems = []
        for expected, model in candidates:
            diff = differences(model.expected_state(), seen)
            if expected == real and not diff:
                return real, model, seen, []
            problems.append(f"model answer {expected.text()}; state differences: {diff[:6] or 'none'}")
        return real, None, seen, problems

    def _record(self, op: ops.Op, before: str, real: Outcome) -> None:
        self.bench.steps += 1
        answer = (
            real.value[0]
            if real.kind == "value" and op.name == "settle"
            else real.text()
            if real.kind == "error"
            else real.kind
        )
        self.bench.coverage[
            (before, op.name + (f" ({op.meta['variant']})" if "variant" in op.meta else ""), answer)
        ] += 1
        self.transcript.append(f"{op.text} -> {real.text()}")

    def learn_ids(self, seen: dict[str, Any]) -> None:
        """The message ids the server chose (a worker learns them by reading its queue)."""
        self.msg_ids.update(seen["message_ids"])

    # -- rules ---------------------------------------------------------------------------

    @initialize(mode=st.sampled_from(["flow", "step"]))
    def first_flow(self, mode: str) -> None:
        self.check(ops.define("m1", mode, "ab"))

    @precondition(lambda self: self.calls["define"] < 4)
    @rule(slug=st.sampled_from(SLUGS), mode=st.sampled_from(["flow", "step"]), shape=st.sampled_from(ops.SHAPES))
    def define(self, slug: str, mode: str, shape: str) -> None:
        self.calls["define"] += 1
        self.check(ops.define(slug, mode, shape))

    @precondition(lambda self: self.calls["start_run"] < 6)
    @rule(data=st.data(), kind=st.sampled_from(["small", "small", "json null", "sql null", "too big"]))
    def start_run(self, data: st.DataObject, kind: str) -> None:
        self.calls["start_run"] += 1
        slug = data.draw(st.sampled_from([*sorted(self.model.flows), "nope"]), label="flow")
        value = {"small": {"n": 1}, "json null": None, "sql null": None, "too big": BIG}[kind]
        op = ops.start_run(slug, value, sql_null=kind == "sql null")
        op.meta["variant"] = kind
        self.check(op)

    def _runs(self) -> list[str]:
        return list(self.model.runs)  # in creation order: ids are random, a replay must choose alike

    def _started(self) -> list[str]:
        return [r for r, v in self.model.runs.items() if v.status == "started"]

    def _drive(self, run: str, result: Any) -> None:
        """The next step a healthy worker or reconciler would take for `run`."""
        r = self.model.runs[run]
        flow = self.model.flows[r.flow]
        current = [c for c, v in self.model.claims.items() if v.run == run and v.state == "current"]
        queued = [s for s, t in r.tasks.items() if t.status == "queued"]
        op: ops.Op
        if r.requested != r.processed or r.health != "clean" or not (current or queued):
            op = ops.reconcile(run, 8)
        elif current:
            op = ops.settle(current[0], "completed", result, "fresh", run)
        else:
            msg = self.msg_ids.get((run, queued[0]))
            op = ops.claim(run, queued[0], flow.queues[queued[0]], [msg], msg, "right")
        op.meta["variant"] = "drive"
        answer = self.check(op)
        if op.name == "settle" and answer.kind == "value" and answer.value[0] == "accepted":
            self.sent[current[0]] = ("completed", result)

    @precondition(lambda self: bool(self._started()))
    @rule(data=st.data(), result=st.sampled_from(RESULTS))
    def drive(self, data: st.DataObject, result: Any) -> None:
        """Move a started run forward the way a healthy worker and reconciler would."""
        self._drive(data.draw(st.sampled_from(self._started()), label="run"), result)

    @precondition(lambda self: bool(self._started()))
    @rule(data=st.data(), result=st.sampled_from(RESULTS))
    def drive_again(self, data: st.DataObject, result: Any) -> None:
        """The same as `drive` (a second rule makes progress twice as likely as any fault)."""
        self._drive(data.draw(st.sampled_from(self._started()), label="run"), result)

    @precondition(lambda self: bool(self.model.runs))
    @rule(
        data=st.data(), variant=st.sampled_from(["right", "right", "wrong queue", "wrong id", "duplicate ids", "no id"])
    )
    def claim(self, data: st.DataObject, variant: str) -> None:
        run = data.draw(st.sampled_from(self._runs()), label="run")
        flow = self.model.flows[self.model.runs[run].flow]
        step = data.draw(st.sampled_from(flow.steps), label="step")
        msg = self.msg_ids.get((run, step))
        queue = flow.queues[step]
        ids: list[int | None] = [msg]
        if variant == "wrong queue":
            queue = flow.queues[flow.steps[1 - flow.steps.index(step)]] + ("" if flow.mode == "step" else "_x")
        elif variant == "wrong id":
            ids = [(msg or 0) + 1000]
        elif variant == "duplicate ids":
            ids = [msg, msg]
        elif variant == "no id":
            ids = []
        op = ops.claim(run, step, queue, ids, msg, variant)
        op.meta["variant"] = variant
        self.check(op)

    def _claims(self) -> list[str]:
        return list(self.model.claims)

    @precondition(lambda self: bool(self.model.claims))
    @rule(data=st.data(), variant=st.sampled_from(["current claim", "old claim"]))
    def take_over(self, data: st.DataObject, variant: str) -> None:
        claim_id = data.draw(st.sampled_from(self._claims()), label="claim")
        c = self.model.claims[claim_id]
        queue = self.model.flows[self.model.runs[c.run].flow].queues[c.step]
        expected = self.model.current_claim(c.run, c.step) if variant == "current claim" else claim_id
        op = ops.take_over(c.run, c.step, expected or claim_id, queue, self.msg_ids.get((c.run, c.step)), variant)
        op.meta["variant"] = variant
        self.check(op)

    @precondition(lambda self: bool(self.model.claims))
    @rule(
        data=st.data(),
        outcome=st.sampled_from(["completed", "completed", "failed", "done"]),
        result=st.sampled_from(RESULTS),
        variant=st.sampled_from(["fresh", "replay", "replay", "sql_null", "too big"]),
    )
    def settle(self, data: st.DataObject, outcome: str, result: Any, variant: str) -> None:
        claim_id = data.draw(st.sampled_from(self._claims()), label="claim")
        if variant == "replay" and claim_id in self.sent:
            outcome, result = self.sent[claim_id]
        elif variant == "too big":
            result = HUGE
        op = ops.settle(claim_id, outcome, result, variant, self.model.claims[claim_id].run)
        op.meta["variant"] = variant
        answer = self.check(op)
        if answer.kind == "value" and answer.value[0] == "accepted":
            self.sent[claim_id] = (outcome, result)

    @precondition(lambda self: self.calls["settle_unknown_claim"] < 1)
    @rule(outcome=st.sampled_from(["completed", "failed"]))
    def settle_unknown_claim(self, outcome: str) -> None:
        self.calls["settle_unknown_claim"] += 1
        self.check(ops.settle("00000000-0000-4000-8000-000000000000", outcome, {"ok": 1}, "unknown claim", None))

    def _lossy(self) -> list[str]:
        """Current claims whose queue still exists (a dropped queue fails the settle outright)."""
        model = self.model
        live = [c for c, v in model.claims.items() if v.state == "current"]
        return list(c for c in live if model.runs[model.claims[c].run].tasks[model.claims[c].step].queue
                      not in model.dropped)  # fmt: skip

    @precondition(lambda self: bool(self._lossy()) and not self.bench.transactional)
    @rule(data=st.data(), outcome=st.sampled_from(["completed", "failed"]))
    def settle_with_a_lost_acknowledgement(self, data: st.DataObject, outcome: str) -> None:
        """The reply to COMMIT is lost by a real proxy: the client cannot know whether the
        settlement committed (Jepsen's indeterminate operation); the model accepts either state,
        and the next settle of this claim (a replay) decides."""
        self.lost_ack(data.draw(st.sampled_from(self._lossy()), label="claim"), outcome)

    def lost_ack(self, claim_id: str, outcome: str) -> None:
        """Settle `claim_id` through the proxy that loses the reply to its COMMIT; accept the
        state before or after the settlement, whichever the server shows."""
        before = self.state_of(self.model.claims[claim_id].run)
        if self.proxy is None:
            self.proxy = LostAckProxy(self.url)
        self.proxy.arm()
        with connect(self.proxy.url, application_name="model_lost_ack") as conn:
            try:
                with conn.transaction():  # the reply to its COMMIT is the one the proxy loses
                    conn.execute("select engine.v2_settle(%s, %s, %s)", (claim_id, outcome, Jsonb({"ok": 1})))
                raise ModelMismatch("the proxy did not lose the acknowledgement")
            except psycopg.OperationalError:
                pass
        seen = snapshot(self.conn)
        settled = self.model.copy()
        settled.settle(claim_id, outcome, {"ok": 1}, 8)
        for candidate, label in ((self.model, "did not commit"), (settled, "committed")):
            if not differences(candidate.expected_state(), seen):
                self.model = candidate
                self.sent.setdefault(claim_id, (outcome, {"ok": 1}))
                self.transcript.append(
                    f"settle claim {claim_id[:8]} {outcome} through a lost acknowledgement -> {label}"
                )
                self.bench.coverage[(before, "settle (lost ack)", label)] += 1
                self.bench.steps += 1
                return
        raise ModelMismatch(f"after a lost acknowledgement the state is neither settled nor unsettled: "
                            f"{differences(settled.expected_state(), seen)[:6]}")  # fmt: skip

    @precondition(lambda self: bool(self.model.runs))
    @rule(data=st.data(), max_actions=st.sampled_from([1, 1, 8, 64, 0, 65, None]))
    def reconcile(self, data: st.DataObject, max_actions: int | None) -> None:
        run = data.draw(st.sampled_from(self._runs()), label="run")
        self.check(ops.reconcile(run, max_actions))

    @rule(seconds=st.sampled_from([1, 40, 100]))
    def advance_the_clock(self, seconds: int) -> None:
        """Move the engine's test clock (a superuser session setting) forward."""
        self.advance(seconds)

    def advance(self, seconds: int) -> None:
        self.offset += seconds
        self.model.offset = self.offset
        self.conn.execute(f"set engine.clock_offset = '{self.offset:.0f} seconds'")
        self.transcript.append(f"advance the engine clock by {seconds} s (offset {self.offset:.0f} s)")

    def _poisonable(self) -> list[str]:
        """Flows with a run whose B is not dispatched yet (once per history: a poison is rare)."""
        if self.model.dropped:
            return []
        return sorted({r.flow for r in self.model.runs.values() if r.status == "started" and "B" not in r.tasks})

    @precondition(lambda self: bool(self._poisonable()))
    @rule(data=st.data())
    def poison(self, data: st.DataObject) -> None:
        """A dropped route queue: B's dispatch fails in every reconcile until attention."""
        flow = self.model.flows[data.draw(st.sampled_from(self._poisonable()), label="flow")]
        self.check(ops.drop_queue(flow.queues[flow.steps[1]]))

    @precondition(lambda self: bool(self.model.runs) and self.calls["v1"] < 2)
    @rule(data=st.data(), kind=st.sampled_from(["complete", "fail"]))
    def v1_call_on_a_v2_run(self, data: st.DataObject, kind: str) -> None:
        self.calls["v1"] += 1
        run = data.draw(st.sampled_from(self._runs()), label="run")
        step = data.draw(st.sampled_from(self.model.flows[self.model.runs[run].flow].steps), label="step")
        self.check(ops.v1_write(run, step, kind))

    @precondition(lambda self: bool(self.model.flows))
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        queues = sorted({q for f in self.model.flows.values() for q in f.queues.values()})
        self.check(ops.read(data.draw(st.sampled_from(queues), label="queue")))

    @precondition(lambda self: bool(self.model.runs) and not self.bench.transactional)
    @rule(data=st.data(), pair=st.sampled_from(sorted(PAIRS)))
    def two_sessions_at_once(self, data: st.DataObject, pair: str) -> None:
        """Two operations from two real sessions, the first parked at its hook point while the
        second is proven blocked: the outcome must equal a serial order of the model."""
        run = data.draw(st.sampled_from(self._runs()), label="run")
        self.model = race(self, pair, run)
        self.bench.races += 1

    @invariant()
    def nothing_is_left_open(self) -> None:
        status = psycopg.pq.TransactionStatus
        expected = status.INTRANS if self.bench.transactional else status.IDLE
        if self.conn.info.transaction_status != expected:
            raise ModelMismatch("the checker's session was left inside a transaction")
