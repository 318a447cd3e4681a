"""The reference model: what the engine should do, in plain Python, small enough to read in one go.

It holds what an observer can see: flow definitions, runs, step states, tasks, claims,
settlements, the work row (generations, health, errors) and the messages of every queue by
their owner (run, step). Each operation returns the expected `Outcome` (a value, an empty
answer or a SQLSTATE) and changes the model only when the engine would commit something.

Time is the one thing the model cannot know exactly: a lease horizon or a backoff is set at the
server's clock during a call. The model keeps each such instant as a window [earliest, latest]
(the client's clock before and after the call, plus the test clock's offset), and an operation
whose answer depends on an instant inside a window is indeterminate: the model notes it in
`ambiguous`, the checker runs the operation on two copies (`force`) and accepts either answer
with its state (as Jepsen's checker accepts either outcome of an operation whose
acknowledgement was lost).
"""

from __future__ import annotations

import copy
import pickle
from typing import Any

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.model.defrules import DefinitionRules
from evidence_lib.model.state import TOLERANCE, UNDEFINED_TABLE, Claim, FlowDef, Outcome, Run, Task, Window, _canon
from evidence_lib.model.v1rules import V1Rules
from evidence_lib.model.v2rules import V2Rules, definition_key, in_envelope

__all__ = ["Claim", "FlowDef", "Model", "Outcome", "Run", "Task", "Window", "_canon", "definition_key", "in_envelope"]


def _options(flow: FlowDef) -> tuple[Any, ...]:
    """The stored options: the flow's and each step's own (None inherits)."""
    return (flow.max_attempts, flow.base_delay, flow.timeout,
            tuple((s, flow.step(s).max_attempts, flow.step(s).base_delay, flow.step(s).timeout,
                   flow.step(s).start_delay, tuple(sorted(flow.step(s).deps))) for s in flow.steps))  # fmt: skip


def _stamps(run_id: str, run: Run) -> list[tuple[tuple[str, str, str], tuple[bool, bool, bool]]]:
    """Which of started_at, completed_at, failed_at each step state and task must carry: a step
    started when its task was created; a task when it was first claimed or started; completed_at
    with the completed status; failed_at with a failed or cancelled one."""
    out = []
    for step, status in run.steps.items():
        out.append(((run_id, step, "step"), (step in run.tasks, status == "completed",
                                             status in ("failed", "cancelled"))))  # fmt: skip
    for step, task in run.tasks.items():
        out.append(((run_id, step, "task"), (task.attempts > 0, task.status == "completed",
                                             task.status in ("failed", "cancelled"))))  # fmt: skip
    return out


def _shape(flow: FlowDef) -> tuple[Any, ...]:
    """What compile_flow compares: options, mode, and every step with its deps, options and route."""
    steps = tuple((s, tuple(sorted(flow.step(s).deps)), flow.step(s).max_attempts, flow.step(s).base_delay,
                   flow.step(s).timeout, flow.step(s).start_delay, flow.queues[s]) for s in flow.steps)  # fmt: skip
    return (flow.max_attempts, flow.base_delay, flow.timeout, flow.mode, steps)


class Model(DefinitionRules, V1Rules, V2Rules):
    def __init__(self) -> None:
        self.flows: dict[str, FlowDef] = {}
        self.runs: dict[str, Run] = {}
        self.claims: dict[str, Claim] = {}
        self.settlements: dict[str, tuple[str, Any, int]] = {}  # claim -> (outcome, result, generation)
        self.queues: dict[str, dict[tuple[str, str], str]] = {}  # queue -> owner -> live/archived
        self.dropped: set[str] = set()
        self.foreign: set[str] = set()
        self.armed: set[str] = set()  # test hooks armed to fail
        self.listening: set[str] = set()  # the channels this session waits on (v2_listen)
        self.offset = 0.0  # the test clock: the engine's time is the real time plus this
        self.force: dict[str, bool] = {}  # the answer to an ambiguous time comparison
        self.ambiguous: list[str] = []

    def copy(self) -> Model:
        clone: Model = pickle.loads(pickle.dumps(self, pickle.HIGHEST_PROTOCOL))  # deepcopy, five times faster
        clone.force, clone.ambiguous = {}, []
        return clone

    def _before(self, now: Window, instant: Window, what: str) -> bool:
        """Whether the server's `now` was before `instant`; when the windows overlap, the
        forced answer (default True) and the question is noted as ambiguous. The instant's
        window is widened by TOLERANCE on both sides, as the checker widens it when it accepts
        the database's instant: an instant accepted 30 ms before its window must not be
        answered "not yet" with certainty 20 ms later (a CI run on PostgreSQL 15 answered a
        backoff "not over" while the engine, whose instant had been accepted, found it over)."""
        if now[1] < instant[0] - TOLERANCE:
            return True
        if now[0] >= instant[1] + TOLERANCE:
            return False
        self.ambiguous.append(what)
        return self.force.get(what, True)

    # -- definitions ------------------------------------------------------------------------

    def define(self, flow: FlowDef) -> Outcome:
        """The Python client's compile: the same definition again is a no-op, another one a
        mismatch (nothing written); a new one is create_flow then add_step per step, in one
        transaction (a refusal anywhere leaves nothing)."""
        same = self.flows.get(flow.slug)
        if same is not None:
            return Outcome("empty") if _shape(same) == _shape(flow) else Outcome.error("mismatch")
        saved = copy.deepcopy((self.flows, self.queues, self.dropped, self.foreign))
        answer = self.create_flow(flow.slug, flow.max_attempts, flow.base_delay, flow.timeout, flow.mode)
        for step in flow.steps if answer.kind == "value" else []:
            d = flow.step(step)
            answer = self.add_step(flow.slug, step, list(d.deps), d.max_attempts, d.base_delay, d.timeout,
                                   d.start_delay)  # fmt: skip
            if answer.kind != "value":
                break
        if answer.kind != "value":
            self.flows, self.queues, self.dropped, self.foreign = saved
            return answer
        self.flows[flow.slug].shape = flow.shape
        return Outcome("value", flow.slug)

    def forget_run(self, run_id: str) -> None:
        """A run deleted with what hangs off it (claims, settlements, its work row, errors)."""
        self.runs.pop(run_id, None)
        for claim_id in [c for c, v in self.claims.items() if v.run == run_id]:
            del self.claims[claim_id]
            self.settlements.pop(claim_id, None)

    # -- v2 ---------------------------------------------------------------------------------

    # -- faults and v1 calls on v2 rows -----------------------------------------------------

    def read(self, queue: str, now: Window) -> Outcome:
        """pgmq.read with vt 0: the live messages visible at the real time, whose vt it resets."""
        if queue in self.dropped or (queue not in self.queues and queue not in self.foreign):
            return Outcome.error(UNDEFINED_TABLE)
        real = (now[0] - self.offset, now[1] - self.offset)
        visible = []
        for owner, state in sorted(self.queues.get(queue, {}).items()):
            task = self.runs[owner[0]].tasks[owner[1]]
            if state == "live" and not self._before(real, task.vt, f"{owner[1]} of {owner[0][:8]} not yet visible"):
                visible.append(owner)
                task.vt = real
        return Outcome("value", tuple(visible))

    def drop_queue(self, queue: str) -> Outcome:
        if queue in self.dropped or queue not in self.queues:
            return Outcome("value", False)
        self.dropped.add(queue)
        for run_id, step in self.queues[queue]:
            self.runs[run_id].tasks[step].message = "gone"
        self.queues[queue] = {}
        return Outcome("value", True)

    def listen(self, channel: str | None) -> Outcome:
        """v2_listen: engine_v2_dirty, or engine_queue_<the queue of a step>; else DR014."""
        routes = {f"engine_queue_{q}" for f in self.flows.values() for q in f.queues.values()}
        if channel is None or (channel != "engine_v2_dirty" and channel not in routes):
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        self.listening.add(channel)
        return Outcome("value", None)

    def unlisten(self, channel: str | None) -> Outcome:
        self.listening = set() if channel is None else self.listening - {channel}
        return Outcome("value", None)

    def v1_write(self, run_id: str, step: str) -> Outcome:
        """complete_task / fail_task on a v2 run's task: refused, nothing written."""
        if run_id not in self.runs:  # the run is checked first: any step of a v2 run is refused
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        return Outcome.error(SqlState.V1_WRITER_ON_V2)

    # -- what the database should show -----------------------------------------------------

    def expected_state(self) -> dict[str, Any]:
        """The model in the form `observe.snapshot` reads the database."""
        v2 = {r: v for r, v in self.runs.items() if v.protocol == "v2"}
        return {
            "flows": {f.slug: (f.mode, tuple(sorted(f.queues.items()))) for f in self.flows.values()},
            "options": {f.slug: _options(f) for f in self.flows.values()},
            "runs": {r: (v.flow, v.status, _canon(v.output), v.protocol, v.remaining_steps)
                     for r, v in self.runs.items()},
            "stamps": {key: flags for r, v in self.runs.items() for key, flags in _stamps(r, v)},
            "steps": {(r, s): (st, v.remaining_deps.get(s, 0))
                      for r, v in self.runs.items() for s, st in v.steps.items()},
            "tasks": {
                (r, s): (t.status, t.queue, t.message, t.attempts, t.losses, _canon(t.output), t.error)
                for r, v in self.runs.items()
                for s, t in v.tasks.items()
            },
            "claims": {c: (v.run, v.step, v.state, v.attempt, v.replaced_by, v.timeout, v.max_attempts, v.start_delay)
                       for c, v in self.claims.items()},
            "settlements": {c: (o, _canon(r), g) for c, (o, r, g) in self.settlements.items()},
            "work": {r: (v.requested, v.processed, v.health, v.errors) for r, v in v2.items()},
            "errors": {r: v.error_rows for r, v in v2.items() if v.error_rows},
            "queues": {q: dict(sorted(m.items())) for q, m in self.queues.items() if q not in self.dropped}
            | {q: {} for q in self.foreign},
            # instants: each live message's visibility time and each current claim's lease (windows)
            "vt": {(r, s): t.vt for r, v in self.runs.items() for s, t in v.tasks.items() if t.message == "live"},
            "leases": {c: v.lease for c, v in self.claims.items()},
            "listening": {c: True for c in self.listening},
            "next_attempts": {r: v.next_attempt for r, v in v2.items()},
        }
