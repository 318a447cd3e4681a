"""The reference model of the v1 cascade engine: start_flow, start_tasks, complete_task,
fail_task (retries with exponential backoff), requeue_stalled_tasks (the effective step timeout),
prune_data_older_than, and the v1 writers' refusals on v2 state.

v1 reads `clock_timestamp()` (the test clock is for v2 only): its windows are real time. A
stalled task is made by ageing its `started_at` (a superuser write the transcript names), not by
waiting."""

from __future__ import annotations

import json
from typing import Any

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.model.state import UNDEFINED_TABLE, FlowDef, Outcome, Run, Task, Window, _canon

GRACE = 2.0  # start_tasks and the stalled check add 2 s to the effective timeout


def jsonb_text(value: Any) -> str:
    """`value::text` as PostgreSQL prints jsonb: keys by length then bytes, `, ` and `: `."""
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode()))
        return "{" + ", ".join(f"{json.dumps(k)}: {jsonb_text(v)}" for k, v in items) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(jsonb_text(v) for v in value) + "]"
    return json.dumps(value)


def _shift(window: Window, seconds: float) -> Window:
    return (window[0] + seconds, window[1] + seconds)


class V1Rules:
    """Mixed into `Model`."""

    flows: dict[str, FlowDef]
    runs: dict[str, Run]
    queues: dict[str, dict[tuple[str, str], str]]
    dropped: set[str]

    def _before(self, now: Window, instant: Window, what: str) -> bool:
        raise NotImplementedError

    def task_input(self, run_id: str, step: str) -> Any:
        """What a grant hands the handler: the run input for a root step, else {"run": input, dep: output}."""
        run = self.runs[run_id]
        deps = self.flows[run.flow].step(step).deps
        if not deps:
            return run.input
        out: dict[str, Any] = {"run": run.input}
        for dep in deps:
            task = run.tasks.get(dep)
            if task is not None:
                out[dep] = task.output
        return out

    def _start_ready(self, run_id: str, now: Window) -> Outcome | None:
        run = self.runs[run_id]
        flow = self.flows[run.flow]
        ready = sorted(s for s, st in run.steps.items() if st == "created" and run.remaining_deps.get(s, 0) == 0)
        if any(flow.queues[s] in self.dropped for s in ready):
            return Outcome.error(UNDEFINED_TABLE)
        for step in ready:
            run.steps[step] = "started"
            delay = flow.effective(step, "start_delay")
            run.tasks[step] = Task("queued", flow.queues[step], vt=_shift(now, delay))
            self.queues[flow.queues[step]][(run_id, step)] = "live"
        return None

    def start_flow(self, slug: str, input: Any, run_id: str | None, now: Window, sql_null: bool = False) -> Outcome:
        flow = self.flows.get(slug)
        if flow is None:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        if sql_null:
            return Outcome.error(SqlState.BAD_OUTCOME_OR_RESULT)
        roots = [s for s in flow.steps if not flow.step(s).deps]
        if any(flow.queues[s] in self.dropped for s in roots):
            return Outcome.error(UNDEFINED_TABLE)
        if run_id is None:
            return Outcome("value", "run")
        run = Run(slug, protocol="v1", input=input, remaining_steps=len(flow.steps))
        run.steps = {s: "created" for s in flow.steps}
        run.remaining_deps = {s: len(flow.step(s).deps) for s in flow.steps}
        self.runs[run_id] = run
        self._start_ready(run_id, now)
        if not flow.steps:
            run.status, run.output, run.ended = "completed", {}, now
        return Outcome("value", "run")

    def start_tasks(self, queue: str, owners: list[tuple[str, str]], now: Window) -> Outcome:
        """`owners`: the tasks whose message ids (in `queue`) the caller passed."""
        granted = []
        for run_id, step in sorted(owners):
            run = self.runs.get(run_id)
            task = run.tasks.get(step) if run else None
            if run is None or task is None or task.queue != queue.lower() or task.status != "queued":
                continue
            if run.status != "started" or run.protocol != "v1":
                continue
            if task.message != "live":
                return Outcome.error(UNDEFINED_TABLE)
            flow = self.flows[run.flow]
            task.status, task.attempts, task.started = "started", task.attempts + 1, now
            task.vt = _shift(now, flow.effective(step, "timeout") + GRACE)
            granted.append((run_id, step, _canon(self.task_input(run_id, step))))
        return Outcome("value", tuple(granted))

    def _v1_report(self, run_id: str, step: str, index: int) -> Outcome | tuple[Run, Task]:
        run = self.runs.get(run_id)
        if run is None:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        if run.protocol != "v1":
            return Outcome.error(SqlState.V1_WRITER_ON_V2)
        task = run.tasks.get(step) if index == 0 else None
        if task is None:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        return run, task

    @staticmethod
    def task_row(task: Task) -> tuple[Any, ...]:
        return (task.status, task.attempts, _canon(task.output), task.error)

    def complete_task(self, run_id: str, step: str, index: int, output: Any, now: Window,
                      sql_null: bool = False) -> Outcome:  # fmt: skip
        if sql_null:
            return Outcome.error(SqlState.BAD_OUTCOME_OR_RESULT)
        found = self._v1_report(run_id, step, index)
        if isinstance(found, Outcome):
            return found
        run, task = found
        if run.status != "started" or task.status != "started":
            return Outcome("value", self.task_row(task))
        flow = self.flows[run.flow]
        if task.queue in self.dropped:
            return Outcome.error(UNDEFINED_TABLE)
        before = (task.status, task.output, task.message, dict(run.steps), dict(run.remaining_deps),
                  run.remaining_steps, dict(run.tasks), dict(self.queues[task.queue]))  # fmt: skip
        task.status, task.output = "completed", output
        self._archive_message(run_id, step)
        run.steps[step] = "completed"
        for dependent in flow.dependents(step):
            if run.steps[dependent] == "created":
                run.remaining_deps[dependent] -= 1
        run.remaining_steps -= 1
        failed = self._start_ready(run_id, now)
        if failed is not None:  # the whole call rolls back
            task.status, task.output, task.message, run.steps, run.remaining_deps = before[:5]
            run.remaining_steps, run.tasks, self.queues[task.queue] = before[5], before[6], before[7]
            return failed
        if run.remaining_steps == 0:
            run.status, run.ended = "completed", now
            run.output = {s: run.tasks[s].output for s in flow.leaves() if s in run.tasks}
        return Outcome("value", self.task_row(task))

    def _archive_message(self, run_id: str, step: str) -> None:
        task = self.runs[run_id].tasks[step]
        if task.message == "live":
            task.message = "archived"
            self.queues[task.queue][(run_id, step)] = "archived"

    def fail_v1_run(self, run_id: str, now: Window) -> None:
        """_fail_run: the run fails, unfinished step states and tasks are cancelled, their messages archived."""
        run = self.runs[run_id]
        if run.status == "started":
            run.status, run.ended = "failed", now
        for step, status in run.steps.items():
            if status in ("created", "started"):
                run.steps[step] = "cancelled"
        for step, task in run.tasks.items():
            if task.status in ("queued", "started"):
                task.status = "cancelled"
                self._archive_message(run_id, step)

    def fail_task(self, run_id: str, step: str, index: int, message: str, now: Window) -> Outcome:
        found = self._v1_report(run_id, step, index)
        if isinstance(found, Outcome):
            return found
        run, task = found
        if run.status != "started" or task.status != "started":
            return Outcome("value", self.task_row(task))
        flow = self.flows[run.flow]
        if task.queue in self.dropped:
            return Outcome.error(UNDEFINED_TABLE)
        if task.attempts < flow.effective(step, "max_attempts"):
            task.status, task.error = "queued", message
            task.vt = _shift(now, flow.effective(step, "base_delay") * 2 ** (task.attempts - 1))
            return Outcome("value", self.task_row(task))
        task.status, task.error = "failed", message
        self._archive_message(run_id, step)
        run.steps[step] = "failed"
        self.fail_v1_run(run_id, now)
        return Outcome("value", self.task_row(task))

    def age(self, run_id: str, step: str, seconds: float) -> Outcome:
        """The test moves a v1 task's started_at back (a superuser write)."""
        task = self.runs[run_id].tasks[step]
        if task.started is not None:
            task.started = _shift(task.started, -seconds)
        return Outcome("value", None)

    def requeue_stalled(self, now: Window) -> Outcome:
        requeued = 0
        for run_id in sorted(self.runs):
            run = self.runs[run_id]
            if run.protocol != "v1":
                continue
            flow = self.flows[run.flow]
            for step in sorted(run.tasks):
                task = run.tasks[step]
                if task.status != "started" or task.started is None or run.status != "started":
                    continue
                timeout = flow.effective(step, "timeout")
                horizon = _shift(task.started, timeout + GRACE)
                if self._before(now, (horizon[0] + 1e-6, horizon[1] + 1e-6), f"{step} of {run_id[:8]} stalled"):
                    continue
                task.error = f"stalled: no result within the step timeout of {timeout} s + 2 s"
                if task.attempts < flow.effective(step, "max_attempts"):
                    task.status, task.vt = "queued", now
                    requeued += 1
                else:
                    task.status = "failed"
                    self._archive_message(run_id, step)
                    run.steps[step] = "failed"
                    self.fail_v1_run(run_id, now)
        return Outcome("value", requeued)

    def forget_run(self, run_id: str) -> None:
        raise NotImplementedError

    def prune(self, retention: float | None, now: Window) -> Outcome:
        """prune_data_older_than: terminal runs that ended before now - retention, with their
        archived messages (live ones, and those of runs kept, stay)."""
        if retention is None or retention < 0:
            return Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE)
        cutoff = _shift(now, -retention)
        pruned = 0
        for run_id in list(self.runs):
            run = self.runs[run_id]
            if run.status not in ("completed", "failed") or run.ended is None:
                continue
            if not self._before(run.ended, cutoff, f"run {run_id[:8]} ended before the cutoff"):
                continue
            for step, task in run.tasks.items():
                if task.message == "archived":
                    self.queues.get(task.queue, {}).pop((run_id, step), None)
            self.forget_run(run_id)
            pruned += 1
        return Outcome("value", pruned)
