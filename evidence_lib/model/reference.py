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
import json
from dataclasses import dataclass, field
from typing import Any

from evidence_lib.engine.sqlstates import SqlState

LEASE_GRACE = 2.0
TAKEOVERS = 1
ERRORS_BEFORE_ATTENTION = 3
INPUT_MAX, RESULT_MAX = 65_536, 262_144
UNDEFINED_TABLE = "42P01"  # pgmq on a dropped queue
Window = tuple[float, float]


@dataclass(frozen=True)
class Outcome:
    kind: str  # "value", "empty", "error"
    value: Any = None  # the value or the SQLSTATE

    @staticmethod
    def error(state: str) -> Outcome:
        return Outcome("error", str(state))

    def text(self) -> str:
        return {"value": f"{self.value}", "empty": "(no row)", "error": f"error {self.value}"}[self.kind]


@dataclass
class FlowDef:
    slug: str
    mode: str  # "flow" or "step"
    shape: str  # "ab" (inside the v2 envelope), "ab_attempts_2", "abc"
    queues: dict[str, str]  # step -> route
    timeout: int

    @property
    def steps(self) -> list[str]:
        return list(self.queues)


@dataclass
class Task:
    status: str  # queued, started, completed, failed, cancelled
    queue: str
    message: str = "live"  # live, archived, gone (its queue was dropped)
    attempts: int = 0
    losses: int = 0
    output: Any = None
    vt: Window = (0.0, 0.0)  # when its message becomes visible to pgmq.read (an absolute time)


@dataclass
class Claim:
    run: str
    step: str
    state: str  # current, settled, revoked
    attempt: int
    lease: Window
    replaced_by: str | None = None


@dataclass
class Run:
    flow: str
    status: str = "started"
    steps: dict[str, str] = field(default_factory=dict)  # step -> status
    tasks: dict[str, Task] = field(default_factory=dict)
    requested: int = 0
    processed: int = 0
    health: str = "clean"
    errors: int = 0  # consecutive
    error_rows: int = 0
    next_attempt: Window | None = None
    output: Any = None


class Model:
    def __init__(self) -> None:
        self.flows: dict[str, FlowDef] = {}
        self.runs: dict[str, Run] = {}
        self.claims: dict[str, Claim] = {}
        self.settlements: dict[str, tuple[str, Any, int]] = {}  # claim -> (outcome, result, generation)
        self.queues: dict[str, dict[tuple[str, str], str]] = {}  # queue -> owner -> live/archived
        self.dropped: set[str] = set()
        self.offset = 0.0  # the test clock: the engine's time is the real time plus this
        self.force: dict[str, bool] = {}  # the answer to an ambiguous time comparison
        self.ambiguous: list[str] = []

    def copy(self) -> Model:
        clone = copy.deepcopy(self)
        clone.force, clone.ambiguous = {}, []
        return clone

    def _before(self, now: Window, instant: Window, what: str) -> bool:
        """Whether the server's `now` was before `instant`; when the windows overlap, the
        forced answer (default True) and the question is noted as ambiguous."""
        if now[1] < instant[0]:
            return True
        if now[0] >= instant[1]:
            return False
        self.ambiguous.append(what)
        return self.force.get(what, True)

    # -- definitions ------------------------------------------------------------------------

    def define(self, flow: FlowDef) -> Outcome:
        same = self.flows.get(flow.slug)
        if same is not None:
            return Outcome("empty") if (same.mode, same.shape) == (flow.mode, flow.shape) else Outcome.error("mismatch")
        if any(f.slug.lower() == flow.slug.lower() for f in self.flows.values()):
            return Outcome.error(SqlState.QUEUE_COLLISION)
        self.flows[flow.slug] = flow
        for queue in set(flow.queues.values()):
            self.queues.setdefault(queue, {})
            self.dropped.discard(queue)
        return Outcome("value", flow.slug)

    # -- v2 ---------------------------------------------------------------------------------

    def start_run(
        self, slug: str, input: Any, size: int, run_id: str | None, now: Window, sql_null: bool = False
    ) -> Outcome:
        flow = self.flows.get(slug)
        if flow is None:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        if flow.shape != "ab":
            return Outcome.error(SqlState.UNSUPPORTED_DEFINITION)
        if sql_null:  # SQL NULL, not JSON null (a JSON null is an input like any other)
            return Outcome.error(SqlState.BAD_OUTCOME_OR_RESULT)
        if size > INPUT_MAX:
            return Outcome.error(SqlState.PAYLOAD_TOO_LARGE)
        a, b = flow.steps
        if flow.queues[a] in self.dropped:
            return Outcome.error(UNDEFINED_TABLE)
        if run_id is None:  # the caller learns the id from the server's answer
            return Outcome("value", "run")
        run = Run(slug, steps={a: "started", b: "created"}, tasks={a: Task("queued", flow.queues[a], vt=now)})
        self.runs[run_id] = run
        self.queues[flow.queues[a]][(run_id, a)] = "live"
        return Outcome("value", "run")

    def _delivery(self, run_id: str, step: str, queue: str, ids: list[int | None], msg: int | None) -> Outcome | None:
        """The argument and identity checks of claim and take over (None: they pass)."""
        if len(ids) != 1 or ids[0] is None:
            return Outcome.error(SqlState.NOT_ONE_MESSAGE_ID)
        run = self.runs.get(run_id)
        if run is None or step not in self.flows[run.flow].queues:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        task = run.tasks.get(step)
        route = self.flows[run.flow].queues[step]
        if task is None or task.queue != queue or route != queue or msg is None or ids[0] != msg:
            return Outcome.error(SqlState.IDENTITY_MISMATCH)
        return None

    def claim(self, run_id: str, step: str, queue: str, ids: list[int | None], msg: int | None,
              now: Window, claim_id: str | None) -> Outcome:  # fmt: skip
        refused = self._delivery(run_id, step, queue, ids, msg)
        if refused:
            return refused
        run = self.runs[run_id]
        task = run.tasks[step]
        if (run.status != "started" or run.requested != run.processed or run.health != "clean"
                or run.steps[step] != "started" or task.status != "queued"):  # fmt: skip
            return Outcome("empty")
        if task.message != "live":
            return self._message_gone(task)
        if claim_id is None:
            return Outcome("value", "grant")
        task.status, task.attempts = "started", task.attempts + 1
        task.vt = self._lease(run, now)  # the message is hidden until the lease horizon
        self.claims[claim_id] = Claim(run_id, step, "current", task.attempts, task.vt)
        return Outcome("value", "grant")

    def _lease(self, run: Run, now: Window) -> Window:
        timeout = self.flows[run.flow].timeout + LEASE_GRACE
        return (now[0] + timeout, now[1] + timeout)

    def _message_gone(self, task: Task) -> Outcome:
        """pgmq.set_vt on a missing message: DR006; on a dropped queue its table is gone (42P01)."""
        return Outcome.error(UNDEFINED_TABLE if task.queue in self.dropped else SqlState.NOT_CLAIMABLE)

    def current_claim(self, run_id: str, step: str) -> str | None:
        found = [c for c, v in self.claims.items() if v.run == run_id and v.step == step and v.state == "current"]
        return found[0] if found else None

    def take_over(self, run_id: str, step: str, expected: str, queue: str, ids: list[int | None], msg: int | None,
                  now: Window, claim_id: str | None) -> Outcome:  # fmt: skip
        refused = self._delivery(run_id, step, queue, ids, msg)
        if refused:
            return refused
        run = self.runs[run_id]
        task = run.tasks[step]
        if (run.status != "started" or task.status != "started" or self.current_claim(run_id, step) != expected
                or run.health == "attention"):  # fmt: skip
            return Outcome.error(SqlState.NOT_CLAIMABLE)
        if self._before(now, self.claims[expected].lease, "takeover before the lease horizon"):
            return Outcome.error(SqlState.TAKEOVER_BEFORE_HORIZON)
        if task.losses >= TAKEOVERS:
            run.health = "attention"
            return Outcome("empty")
        if task.message != "live":
            return self._message_gone(task)
        if claim_id is not None:
            old = self.claims[expected]
            old.state, old.replaced_by = "revoked", claim_id
            task.losses += 1
            task.vt = self._lease(run, now)
            self.claims[claim_id] = Claim(old.run, old.step, "current", old.attempt + 1, task.vt)
        return Outcome("value", "grant")

    def settle(self, claim_id: str, outcome: str | None, result: Any, size: int, sql_null: bool = False) -> Outcome:
        if outcome not in ("completed", "failed"):
            return Outcome.error(SqlState.BAD_OUTCOME_OR_RESULT)
        if sql_null:
            return Outcome.error(SqlState.BAD_OUTCOME_OR_RESULT)
        if size > RESULT_MAX:
            return Outcome.error(SqlState.PAYLOAD_TOO_LARGE)
        claim = self.claims.get(claim_id)
        if claim is None:
            return Outcome.error(SqlState.UNKNOWN_CLAIM)
        run = self.runs[claim.run]
        task = run.tasks[claim.step]
        recorded = self.settlements.get(claim_id)
        if claim.state == "current" and task.status == "started" and run.status == "started" and recorded is None:
            archives = [task.queue] + ([t.queue for s, t in run.tasks.items() if t.status in ("queued", "started")
                                        and s != claim.step] if outcome == "failed" else [])  # fmt: skip
            if any(q in self.dropped for q in archives):
                return Outcome.error(UNDEFINED_TABLE)
            run.requested += 1
            self.settlements[claim_id] = (outcome, result, run.requested)
            task.status = outcome
            task.output = result if outcome == "completed" else None
            run.steps[claim.step] = outcome
            claim.state = "settled"
            self._archive(claim.run, claim.step)
            if outcome == "failed":
                self._fail_run(claim.run)
            return Outcome("value", ("accepted", outcome, _canon(result), run.requested))
        if recorded is not None:
            verdict = "replayed" if (recorded[0], _canon(recorded[1])) == (outcome, _canon(result)) else "conflict"
            return Outcome("value", (verdict, recorded[0], _canon(recorded[1]), recorded[2]))
        verdict = "stale" if claim.state == "revoked" else "terminal"
        return Outcome("value", (verdict, None, None, run.requested))

    def _archive(self, run_id: str, step: str) -> None:
        task = self.runs[run_id].tasks[step]
        if task.message == "live":
            task.message = "archived"
            self.queues[task.queue][(run_id, step)] = "archived"

    def _fail_run(self, run_id: str) -> None:
        run = self.runs[run_id]
        run.status = "failed"
        for step, status in run.steps.items():
            if status in ("created", "started"):
                run.steps[step] = "cancelled"
        for step, task in run.tasks.items():
            if task.status in ("queued", "started"):
                task.status = "cancelled"
                self._archive(run_id, step)

    def reconcile(self, run_id: str, max_actions: int | None, now: Window) -> Outcome:
        if max_actions is None or not 1 <= max_actions <= 64:
            return Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE)
        run = self.runs.get(run_id)
        if run is None:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        skip = self._report(run_id, 0)
        if run.health == "attention":
            return skip
        waiting = run.health == "backoff" and run.next_attempt is not None
        if waiting and run.next_attempt and self._before(now, run.next_attempt, "reconcile before the backoff ends"):
            return skip
        return self._reconcile(run_id, max_actions, now)

    def _report(self, run_id: str, actions: int) -> Outcome:
        run = self.runs[run_id]
        return Outcome("value", (run.requested, actions, run.processed == run.requested, run.health, run.status))

    def _next_action(self, run: Run) -> str | None:
        a, b = self.flows[run.flow].steps
        if run.status != "started":
            return None
        if run.steps[b] == "created" and run.steps[a] == "completed":
            return "dispatch_b"
        return "complete" if run.steps[b] == "completed" else None

    def _reconcile(self, run_id: str, max_actions: int, now: Window) -> Outcome:
        run = self.runs[run_id]
        flow = self.flows[run.flow]
        actions = 0
        while (action := self._next_action(run)) is not None and actions < max_actions:
            if action == "dispatch_b":
                b = flow.steps[1]
                if flow.queues[b] in self.dropped:
                    run.errors += 1
                    run.error_rows += 1
                    run.health = "attention" if run.errors >= ERRORS_BEFORE_ATTENTION else "backoff"
                    delay = min(2.0 ** (run.errors - 1), 60.0)
                    run.next_attempt = (now[0] + delay, now[1] + delay)
                    return Outcome("value", (run.requested, actions, False, run.health, run.status))
                run.steps[b] = "started"
                run.tasks[b] = Task("queued", flow.queues[b], vt=now)
                self.queues[flow.queues[b]][(run_id, b)] = "live"
            else:
                run.status, run.output = "completed", run.tasks[flow.steps[1]].output
            actions += 1
        if action is None and (run.processed != run.requested or run.health != "clean"):
            run.processed, run.health, run.errors, run.next_attempt = run.requested, "clean", 0, None
        elif actions > 0 and run.health != "clean":
            run.health, run.errors, run.next_attempt = "clean", 0, None
        return self._report(run_id, actions)

    # -- faults and v1 calls on v2 rows -----------------------------------------------------

    def read(self, queue: str, now: Window) -> Outcome:
        """pgmq.read with vt 0: the live messages visible at the real time, whose vt it resets."""
        if queue in self.dropped or queue not in self.queues:
            return Outcome.error(UNDEFINED_TABLE)
        real = (now[0] - self.offset, now[1] - self.offset)
        visible = []
        for owner, state in sorted(self.queues[queue].items()):
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

    def v1_write(self, run_id: str, step: str) -> Outcome:
        """complete_task / fail_task on a v2 run's task: refused, nothing written."""
        if run_id not in self.runs:  # the run is checked first: any step of a v2 run is refused
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        return Outcome.error(SqlState.V1_WRITER_ON_V2)

    # -- what the database should show -----------------------------------------------------

    def expected_state(self) -> dict[str, Any]:
        """The model in the form `observe.snapshot` reads the database."""
        return {
            "flows": {f.slug: (f.mode, tuple(sorted(f.queues.items()))) for f in self.flows.values()},
            "runs": {r: (v.flow, v.status, _canon(v.output)) for r, v in self.runs.items()},
            "steps": {(r, s): st for r, v in self.runs.items() for s, st in v.steps.items()},
            "tasks": {
                (r, s): (t.status, t.queue, t.message, t.attempts, t.losses, _canon(t.output))
                for r, v in self.runs.items()
                for s, t in v.tasks.items()
            },
            "claims": {c: (v.run, v.step, v.state, v.attempt, v.replaced_by) for c, v in self.claims.items()},
            "settlements": {c: (o, _canon(r), g) for c, (o, r, g) in self.settlements.items()},
            "work": {r: (v.requested, v.processed, v.health, v.errors) for r, v in self.runs.items()},
            "errors": {r: v.error_rows for r, v in self.runs.items() if v.error_rows},
            "queues": {q: dict(sorted(m.items())) for q, m in self.queues.items() if q not in self.dropped},
        }


def _canon(value: Any) -> Any:
    """A JSON value in one canonical text (jsonb compares 1 and 1.0 equal; so does this)."""
    if value is None:
        return None
    return json.dumps(_numbers(value), sort_keys=True, separators=(",", ":"))


def _numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    return value
