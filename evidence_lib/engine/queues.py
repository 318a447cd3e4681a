"""Queue names: the flow queue of a plain flow and the private queue of each step."""

from __future__ import annotations

PGMQ_MAX_QUEUE_NAME = 47


def flow_queue_name(flow_slug: str) -> str:
    """The queue every step of a plain flow routes to, and the name every flow reserves."""
    return flow_slug.lower()


def step_queue_name(flow_slug: str, step_slug: str, step_index: int) -> str:
    """The private queue of a step: `flow__step` when that fits in 47 characters, else the
    flow name cut to fit before the suffix `__<step_index>`."""
    name = f"{flow_slug.lower()}__{step_slug.lower()}"
    if len(name) <= PGMQ_MAX_QUEUE_NAME:
        return name
    suffix = f"__{step_index}"
    return flow_slug.lower()[: PGMQ_MAX_QUEUE_NAME - len(suffix)] + suffix
