"""The v2 proof flow A -> B that races, faults, benchmarks and scenarios share, and reading
one step's message of one run."""

from __future__ import annotations

from typing import Any, Literal
from uuid import UUID

from evidence_lib.engine import v1
from evidence_lib.engine.flows import AnyFlow, Flow, QueueMode, compile_flow, route, with_step_queues
from evidence_lib.engine.jsontypes import Json
from evidence_lib.errors import EvidenceError
from evidence_lib.pg.db import Conn

ABSteps = Literal["A", "B"]

__all__ = ["ABSteps", "QueueMode", "ab_flow", "define_ab", "identity", "read_step_message", "step_of"]


def identity(payload: Json) -> Json:
    return payload


def ab_flow(
    slug: str = "ab", mode: QueueMode = "flow", *, timeout: int = 30, b_start_delay: int | None = None
) -> AnyFlow:
    """The v2 proof flow: A (root) -> B, max_attempts 1, in the given queue mode."""
    flow: Flow[ABSteps] = Flow(slug, max_attempts=1, base_delay=1, timeout=timeout)
    flow.add("A", identity).add("B", identity, deps=["A"], start_delay=b_start_delay)
    return with_step_queues(flow) if mode == "step" else flow


def define_ab(conn: Conn, slug: str = "ab", mode: QueueMode = "flow", **options: Any) -> AnyFlow:
    flow = ab_flow(slug, mode, **options)
    compile_flow(conn, flow)
    return flow


def read_step_message(conn: Conn, flow: AnyFlow, step: str, run_id: UUID) -> int:
    """Reserve (pgmq.read) the message of `step` of `run_id` and return its id. Messages of
    other runs that the read reserved stay in the queue with their vt moved by the read."""
    task = conn.execute(
        "select message_id from engine.step_tasks where run_id = %s and step_slug = %s", (run_id, step)
    ).fetchone()
    if task is None or task[0] is None:
        raise EvidenceError(f"run {run_id} has no message for step {step}")
    for message in v1.read_messages(conn, route(flow, step), 30, 100):
        if message.msg_id == task[0]:
            return message.msg_id
    raise EvidenceError(f"message {task[0]} of run {run_id} step {step} is not visible")


def step_of(flow: AnyFlow, step: str) -> str | None:
    """The step selector a worker of `flow` needs to serve `step` (None for a plain flow)."""
    return step if flow.queue_mode == "step" else None
