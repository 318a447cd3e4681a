"""What a type checker says about step selectors (checked by mypy in the validation notebook).

Each line whose comment starts with 'rejected' must be an error, and no other line may be one.
"""

from typing import Any

from evidence_lib.engine.flows import Flow, with_step_queues
from evidence_lib.workers.v1 import Worker
from examples.moderation.pipeline import Steps


def probe(url: str, flow: Flow[Steps]) -> list[Any]:
    staged = with_step_queues(flow)
    return [
        Worker(url, flow),  # a plain flow's worker takes no step
        Worker(url, flow, "fetch"),  # rejected: a plain flow has no step selector
        Worker(url, staged),  # rejected: a step-queued flow's worker must name its step
        Worker(url, staged, "classify"),  # one of the flow's steps
        Worker(url, staged, "clasify"),  # rejected: not a step of this flow (a typo)
        flow.add("summarize", lambda x: x),  # rejected: a step the Steps literal does not declare
    ]
