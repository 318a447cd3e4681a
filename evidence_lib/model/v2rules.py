"""The reference model of the v2 protocol: start (the envelope), claim, take over, settle and
reconcile, each refusal with its SQLSTATE in the engine's order, the live-definition check
(DR005), and the test hooks armed to fail (DR900) at the points the engine names."""

from __future__ import annotations

from typing import Any

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.model.state import (
    ERRORS_BEFORE_ATTENTION,
    HOOK_FAILED,
    INPUT_MAX,
    LEASE_GRACE,
    RESULT_MAX,
    START_DELAY_B_MAX,
    TAKEOVERS,
    TIMEOUT_MAX,
    TIMEOUT_MIN,
    UNDEFINED_TABLE,
    Claim,
    FlowDef,
    Outcome,
    Run,
    Task,
    Window,
    _canon,
)
from evidence_lib.model.v1rules import jsonb_text


def in_envelope(flow: FlowDef) -> bool:
    """v2_start_run's envelope: A -> B, effective max_attempts 1, timeouts 1 .. 900, A's start
    delay 0, B's 0 .. 3600."""
    roots = [s for s in flow.steps if not flow.step(s).deps]
    if len(flow.steps) != 2 or len(roots) != 1:
        return False
    a = roots[0]
    b = next(s for s in flow.steps if s != a)
    if tuple(flow.step(b).deps) != (a,):
        return False
    if any(flow.effective(s, "max_attempts") != 1 for s in (a, b)):
        return False
    if not all(TIMEOUT_MIN <= flow.effective(s, "timeout") <= TIMEOUT_MAX for s in (a, b)):
        return False
    return flow.effective(a, "start_delay") == 0 and 0 <= flow.effective(b, "start_delay") <= START_DELAY_B_MAX


def _backoff(run_id: str) -> str:
    """The one question about a run's backoff, asked by v2_reconcile_next's choice and again by
    the v2_reconcile it calls: one forced answer serves both, as the engine's clock only moves
    forward between them (a run chosen as due is never then skipped as still backing off)."""
    return f"the backoff of {run_id[:8]} over"


def definition_key(flow: FlowDef) -> tuple[Any, ...]:
    """What the engine's definition hash covers: the flow's options and mode, and every step
    (slug, index, options, route, deps), in step order."""
    steps = tuple((s, flow.step(s).index, flow.step(s).max_attempts, flow.step(s).base_delay, flow.step(s).timeout,
                   flow.step(s).start_delay, flow.queues[s], tuple(sorted(flow.step(s).deps)))
                  for s in flow.steps)  # fmt: skip
    return (flow.slug, flow.max_attempts, flow.base_delay, flow.timeout, flow.mode, steps)


class V2Rules:
    """Mixed into `Model`."""

    flows: dict[str, FlowDef]
    runs: dict[str, Run]
    claims: dict[str, Claim]
    settlements: dict[str, tuple[str, Any, int]]
    queues: dict[str, dict[tuple[str, str], str]]
    dropped: set[str]
    armed: set[str]  # test hooks armed to fail ("claim.after_run_lock", ...)
    listening: set[str]  # the channels this session waits on (v2_listen)

    def wake(self, channel: str) -> None:
        """_notify_listeners: the engine wakes one waiter on `channel` and consumes its row (this
        session is the only waiter the model's database has)."""
        self.listening.discard(channel)

    def _before(self, now: Window, instant: Window, what: str) -> bool:
        raise NotImplementedError

    def task_input(self, run_id: str, step: str) -> Any:
        raise NotImplementedError

    def _hook(self, point: str) -> Outcome | None:
        return Outcome.error(HOOK_FAILED) if point in self.armed else None

    def _changed(self, run: Run) -> bool:
        return run.definition != definition_key(self.flows[run.flow])

    def start_run(
        self, slug: str, input: Any, size: int, run_id: str | None, now: Window, sql_null: bool = False
    ) -> Outcome:
        flow = self.flows.get(slug)
        if flow is None:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        if hooked := self._hook("start.after_definition_lock"):
            return hooked
        if not in_envelope(flow):
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
        run = Run(slug, steps={a: "started", b: "created"}, tasks={a: Task("queued", flow.queues[a], vt=now)},
                  input=input, remaining_steps=2, remaining_deps={a: 0, b: 1},
                  definition=definition_key(flow))  # fmt: skip
        self.runs[run_id] = run
        self.queues[flow.queues[a]][(run_id, a)] = "live"
        self.wake(f"engine_queue_{flow.queues[a]}")
        return Outcome("value", "run")

    def _delivery(self, run_id: str, step: str, queue: str, ids: list[Any], msg: int | None) -> Outcome | None:
        """The argument and identity checks of claim and take over (None: they pass)."""
        if len(ids) != 1 or not isinstance(ids[0], int):  # none, two, a NULL, a nested array
            return Outcome.error(SqlState.NOT_ONE_MESSAGE_ID)
        run = self.runs.get(run_id)
        if run is None:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        if run.protocol != "v2":
            return Outcome.error(SqlState.V2_CALL_ON_V1_RUN)
        if step not in self.flows[run.flow].queues:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        task = run.tasks.get(step)
        route = self.flows[run.flow].queues[step]
        if task is None or task.queue != queue or route != queue or msg is None or ids[0] != msg:
            return Outcome.error(SqlState.IDENTITY_MISMATCH)
        return None

    def claim(self, run_id: str, step: str, queue: str, ids: list[Any], msg: int | None,
              now: Window, claim_id: str | None) -> Outcome:  # fmt: skip
        refused = self._delivery(run_id, step, queue, ids, msg) or self._hook("claim.after_run_lock")
        if refused:
            return refused
        run = self.runs[run_id]
        if self._changed(run):
            return Outcome.error(SqlState.DEFINITION_CHANGED)
        task = run.tasks[step]
        if (run.status != "started" or run.requested != run.processed or run.health != "clean"
                or run.steps[step] != "started" or task.status != "queued"):  # fmt: skip
            return Outcome("empty")
        if hooked := self._hook("claim.before_guarded_update"):
            return hooked
        if task.message != "live":
            return self._message_gone(task)
        grant = Outcome("value", ("grant", _canon(self.task_input(run_id, step))))
        if claim_id is None:
            return grant
        flow = self.flows[run.flow]
        task.status, task.attempts = "started", task.attempts + 1
        task.vt = self._lease(run, step, now)  # the message is hidden until the lease horizon
        self.claims[claim_id] = Claim(run_id, step, "current", task.attempts, task.vt, None,
                                      flow.effective(step, "timeout"), flow.effective(step, "max_attempts"),
                                      flow.effective(step, "start_delay"))  # fmt: skip
        return grant

    def _lease(self, run: Run, step: str, now: Window) -> Window:
        """The lease horizon: claim time + the step's effective timeout + 2 s."""
        timeout = self.flows[run.flow].effective(step, "timeout") + LEASE_GRACE
        return (now[0] + timeout, now[1] + timeout)

    def _message_gone(self, task: Task) -> Outcome:
        """pgmq.set_vt on a missing message: DR006; on a dropped queue its table is gone (42P01)."""
        return Outcome.error(UNDEFINED_TABLE if task.queue in self.dropped else SqlState.NOT_CLAIMABLE)

    def current_claim(self, run_id: str, step: str) -> str | None:
        found = [c for c, v in self.claims.items() if v.run == run_id and v.step == step and v.state == "current"]
        return found[0] if found else None

    def take_over(self, run_id: str, step: str, expected: str, queue: str, ids: list[Any], msg: int | None,
                  now: Window, claim_id: str | None) -> Outcome:  # fmt: skip
        refused = self._delivery(run_id, step, queue, ids, msg) or self._hook("take_over.after_run_lock")
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
            grace = old.timeout + LEASE_GRACE  # the claim's own policy, not the live definition
            task.vt = (now[0] + grace, now[1] + grace)
            self.claims[claim_id] = Claim(old.run, old.step, "current", old.attempt + 1, task.vt, None, old.timeout,
                                          old.max_attempts, old.start_delay)  # fmt: skip
        return Outcome("value", ("grant", _canon(self.task_input(run_id, step))))

    def settle(self, claim_id: str, outcome: str | None, result: Any, size: int, sql_null: bool = False,
               now: Window = (0.0, 0.0)) -> Outcome:  # fmt: skip
        if outcome not in ("completed", "failed"):
            return Outcome.error(SqlState.BAD_OUTCOME_OR_RESULT)
        if sql_null:
            return Outcome.error(SqlState.BAD_OUTCOME_OR_RESULT)
        if size > RESULT_MAX:
            return Outcome.error(SqlState.PAYLOAD_TOO_LARGE)
        claim = self.claims.get(claim_id)
        if claim is None:
            return Outcome.error(SqlState.UNKNOWN_CLAIM)
        if hooked := self._hook("settle.after_run_lock"):
            return hooked
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
            task.error = None if outcome == "completed" else jsonb_text(result)
            run.steps[claim.step] = outcome
            claim.state = "settled"
            self._archive(claim.run, claim.step)
            self.wake("engine_v2_dirty")
            if outcome == "failed":
                self._fail_run(claim.run)
                run.ended = now
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
        if run.protocol != "v2":
            return Outcome.error(SqlState.V2_CALL_ON_V1_RUN)
        if self._changed(run):
            return Outcome.error(SqlState.DEFINITION_CHANGED)
        if hooked := self._hook("reconcile.after_work_lock"):
            return hooked
        skip = self._report(run_id, 0)
        if run.health == "attention":
            return skip
        waiting = run.health == "backoff" and run.next_attempt is not None
        if waiting and run.next_attempt and self._before(now, run.next_attempt, _backoff(run_id)):
            return skip
        action = self._next_action(run)
        if not (action is not None and self._fails(run, action)) and (hooked := self._hook(
                "reconcile.before_mark_processed")):  # fmt: skip
            return hooked  # the whole call rolls back, its actions with it
        return self._reconcile(run_id, max_actions, now)

    def due(self, now: Window, skip: tuple[str, ...] = ()) -> list[str]:
        """The runs v2_reconcile_next may take, in its order: dirty, not in attention, backoff
        over by the engine's clock; no next attempt first, then the earliest; then by run id."""
        due = []
        for run_id, run in self.runs.items():
            if run.protocol != "v2" or run.requested <= run.processed or run.health == "attention" or run_id in skip:
                continue
            waiting = run.health == "backoff" and run.next_attempt is not None
            if waiting and run.next_attempt and self._before(now, run.next_attempt, _backoff(run_id)):
                continue
            due.append(run_id)
        return sorted(due, key=lambda r: (self.runs[r].next_attempt is not None,
                                          (self.runs[r].next_attempt or (0.0, 0.0))[0], r))  # fmt: skip

    def reconcile_next(self, max_actions: int | None, now: Window, skip: tuple[str, ...] = ()) -> Outcome:
        """v2_reconcile_next: the first due run, reconciled as v2_reconcile (its id with the report)."""
        if max_actions is None or not 1 <= max_actions <= 64:
            return Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE)
        due = self.due(now, skip)
        if not due:
            return Outcome("empty")
        report = self.reconcile(due[0], max_actions, now)
        return Outcome(report.kind, (due[0], *report.value) if report.kind == "value" else report.value)

    def _fails(self, run: Run, action: str) -> bool:
        """An action rolls back: B's route queue is gone, or the hook after each action is armed."""
        flow = self.flows[run.flow]
        poisoned = action == "dispatch_b" and flow.queues[flow.steps[1]] in self.dropped
        return "reconcile.action" in self.armed or poisoned

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
            if self._fails(run, action):  # rolled back, recorded, counted; backoff or attention commits
                run.errors += 1
                run.error_rows += 1
                run.health = "attention" if run.errors >= ERRORS_BEFORE_ATTENTION else "backoff"
                delay = min(2.0 ** (run.errors - 1), 60.0)
                run.next_attempt = (now[0] + delay, now[1] + delay)
                return Outcome("value", (run.requested, actions, False, run.health, run.status))
            if action == "dispatch_b":
                b = flow.steps[1]
                run.steps[b], run.remaining_deps[b] = "started", 0
                delay = flow.effective(b, "start_delay")
                run.tasks[b] = Task("queued", flow.queues[b], vt=(now[0] + delay, now[1] + delay))
                self.queues[flow.queues[b]][(run_id, b)] = "live"
                self.wake(f"engine_queue_{flow.queues[b]}")
            else:
                run.status, run.output = "completed", run.tasks[flow.steps[1]].output
                run.remaining_steps, run.ended = 0, now
            actions += 1
        if action is None and (run.processed != run.requested or run.health != "clean"):
            run.processed, run.health, run.errors, run.next_attempt = run.requested, "clean", 0, None
        elif actions > 0 and run.health != "clean":
            run.health, run.errors, run.next_attempt = "clean", 0, None
        return self._report(run_id, actions)

