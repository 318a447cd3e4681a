"""Task messages: they carry only identity, `{"protocol", "run_id", "step_slug", "task_index"}`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast
from uuid import UUID

from evidence_lib.engine.jsontypes import Json
from evidence_lib.errors import EvidenceError

Protocol = Literal["v1", "v2"]


class UnsupportedMessage(EvidenceError):
    """A message that is not a task message of ours; it must be left intact."""


@dataclass(frozen=True)
class TaskMessage:
    protocol: Protocol
    run_id: UUID
    step_slug: str
    task_index: int


def parse_task_message(body: Json) -> TaskMessage:
    """The identity a message carries, or `UnsupportedMessage` saying why it is not ours."""
    if not isinstance(body, dict):
        raise UnsupportedMessage(f"body is {type(body).__name__}, not a JSON object")
    keys = set(body)
    expected = {"protocol", "run_id", "step_slug", "task_index"}
    if keys != expected:
        raise UnsupportedMessage(f"keys {sorted(keys)} are not {sorted(expected)}")
    protocol, run_id, step_slug, task_index = (
        body["protocol"],
        body["run_id"],
        body["step_slug"],
        body["task_index"],
    )
    if protocol not in ("v1", "v2"):
        raise UnsupportedMessage(f"unknown protocol {protocol!r}")
    if not isinstance(step_slug, str) or not isinstance(task_index, int) or isinstance(task_index, bool):
        raise UnsupportedMessage("step_slug or task_index has the wrong type")
    try:
        run = UUID(str(run_id))
    except ValueError as exc:
        raise UnsupportedMessage(f"run_id {run_id!r} is not a uuid") from exc
    return TaskMessage(cast(Protocol, protocol), run, step_slug, task_index)
