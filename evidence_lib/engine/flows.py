"""Typed flow definitions and their idempotent compilation into `engine.flows/steps/deps`.

A `Flow` is generic in the literal type of its step slugs, so a type checker rejects a step
selector that is not one of the flow's steps:

    Steps = Literal["fetch", "classify"]
    flow: Flow[Steps] = Flow("moderation")

    @flow.step("fetch")
    def fetch(payload: Json) -> Json: ...

`with_step_queues(flow)` gives the same DAG with private per-step queues (deployment
metadata, not shape). Compiling the same definition again is a no-op; a different one raises
`FlowMismatch` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from evidence_lib.engine.jsontypes import Json
from evidence_lib.engine.queues import flow_queue_name, step_queue_name
from evidence_lib.errors import EvidenceError
from evidence_lib.pg.db import Conn

S = TypeVar("S", bound=str)
Handler = Callable[[Json], Json]
QueueMode = Literal["flow", "step"]


class FlowDefinitionError(EvidenceError):
    """A flow definition is invalid before it reaches the database."""


class FlowMismatch(EvidenceError):
    """The flow exists in the database with a different definition; nothing was changed."""


@dataclass(frozen=True)
class StepDef:
    slug: str
    handler: Handler
    deps: tuple[str, ...] = ()
    max_attempts: int | None = None
    base_delay: int | None = None
    timeout: int | None = None
    start_delay: int | None = None


@dataclass
class Flow(Generic[S]):
    """A flow whose steps all route to one queue, `lower(slug)`; its worker takes no step."""

    slug: str
    max_attempts: int = 3
    base_delay: int = 1
    timeout: int = 60
    steps: list[StepDef] = field(default_factory=list)

    @property
    def queue_mode(self) -> QueueMode:
        return "flow"

    def add(
        self,
        slug: S,
        handler: Handler,
        *,
        deps: Sequence[S] = (),
        max_attempts: int | None = None,
        base_delay: int | None = None,
        timeout: int | None = None,
        start_delay: int | None = None,
    ) -> Flow[S]:
        """Append a step (deps must already be steps of this flow); returns the flow."""
        if any(s.slug == slug for s in self.steps):
            raise FlowDefinitionError(f"flow {self.slug}: step {slug} is defined twice")
        known = {s.slug for s in self.steps}
        unknown = [d for d in deps if d not in known]
        if unknown:
            raise FlowDefinitionError(
                f"flow {self.slug}, step {slug}: unknown dependencies {unknown} "
                "(define a step before the steps that depend on it)"
            )
        self.steps.append(StepDef(slug, handler, tuple(deps), max_attempts, base_delay, timeout, start_delay))
        return self

    def step(
        self,
        slug: S,
        *,
        deps: Sequence[S] = (),
        max_attempts: int | None = None,
        base_delay: int | None = None,
        timeout: int | None = None,
        start_delay: int | None = None,
    ) -> Callable[[Handler], Handler]:
        """Decorator form of `add`."""

        def register(handler: Handler) -> Handler:
            self.add(
                slug,
                handler,
                deps=deps,
                max_attempts=max_attempts,
                base_delay=base_delay,
                timeout=timeout,
                start_delay=start_delay,
            )
            return handler

        return register

    def step_def(self, slug: str) -> StepDef:
        for s in self.steps:
            if s.slug == slug:
                return s
        raise FlowDefinitionError(f"flow {self.slug} has no step {slug!r}")

    @property
    def step_slugs(self) -> list[str]:
        return [s.slug for s in self.steps]


@dataclass(frozen=True)
class StepQueuedFlow(Generic[S]):
    """The same flow with one private queue per step; its workers each serve one step."""

    flow: Flow[S]

    @property
    def slug(self) -> str:
        return self.flow.slug

    @property
    def queue_mode(self) -> QueueMode:
        return "step"

    @property
    def steps(self) -> list[StepDef]:
        return self.flow.steps

    def step_def(self, slug: str) -> StepDef:
        return self.flow.step_def(slug)

    @property
    def step_slugs(self) -> list[str]:
        return self.flow.step_slugs


AnyFlow = Flow[Any] | StepQueuedFlow[Any]


def with_step_queues(flow: Flow[S]) -> StepQueuedFlow[S]:
    """The same DAG, deployed with a private queue per step."""
    return StepQueuedFlow(flow)


@dataclass(frozen=True)
class Shape:
    """What the database stores of a flow: options, mode, and each step with its options."""

    options: tuple[Any, ...]
    steps: tuple[tuple[Any, ...], ...]


def route(flow: AnyFlow, step_slug: str) -> str:
    """The queue a step's messages are sent to."""
    if isinstance(flow, StepQueuedFlow):
        return step_queue_name(flow.slug, step_slug, flow.step_slugs.index(step_slug))
    return flow_queue_name(flow.slug)


def desired_shape(flow: AnyFlow) -> Shape:
    base = flow.flow if isinstance(flow, StepQueuedFlow) else flow
    options = (base.max_attempts, base.base_delay, base.timeout, flow.queue_mode)
    steps = tuple(
        (
            i,
            s.slug,
            tuple(sorted(s.deps)),
            s.max_attempts,
            s.base_delay,
            s.timeout,
            s.start_delay,
            route(flow, s.slug),
        )
        for i, s in enumerate(base.steps)
    )
    return Shape(options, steps)


def stored_shape(conn: Conn, flow_slug: str) -> Shape | None:
    """The shape stored for `flow_slug`, or None when the flow does not exist."""
    row = conn.execute(
        "select max_attempts, base_delay, timeout, queue_mode from engine.flows where flow_slug = %s",
        (flow_slug,),
    ).fetchone()
    if row is None:
        return None
    steps = conn.execute(
        """select s.step_index, s.step_slug,
                  coalesce((select array_agg(d.dep_slug order by d.dep_slug) from engine.deps d
                             where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug),
                           '{}'),
                  s.max_attempts, s.base_delay, s.timeout, s.start_delay, s.queue_name
             from engine.steps s where s.flow_slug = %s order by s.step_index""",
        (flow_slug,),
    ).fetchall()
    return Shape(tuple(row), tuple((r[0], r[1], tuple(r[2]), *r[3:]) for r in steps))


def _describe(shape: Shape | None) -> str:
    if shape is None:
        return "absent"
    ma, bd, to, mode = shape.options
    steps = ", ".join(f"{s[1]}(deps={list(s[2])}, queue={s[7]})" for s in shape.steps)
    return f"max_attempts={ma} base_delay={bd} timeout={to} queue_mode={mode} steps=[{steps}]"


def compile_flow(conn: Conn, flow: AnyFlow) -> bool:
    """Create `flow` in the database unless it exists; returns True when it was created.

    An existing flow with the same shape is left alone; any difference raises `FlowMismatch`
    before anything is written (no silent recompilation).
    """
    if not flow.steps:
        raise FlowDefinitionError(f"flow {flow.slug} has no steps")
    want = desired_shape(flow)
    with conn.transaction():
        have = stored_shape(conn, flow.slug)
        if have is not None:
            if have != want:
                raise FlowMismatch(
                    f"flow {flow.slug} exists with a different definition; nothing changed.\n"
                    f"  stored:  {_describe(have)}\n  defined: {_describe(want)}"
                )
            return False
        base = flow.flow if isinstance(flow, StepQueuedFlow) else flow
        create_args: dict[str, Any] = {
            "flow_slug": base.slug,
            "max_attempts": base.max_attempts,
            "base_delay": base.base_delay,
            "timeout": base.timeout,
        }
        if flow.queue_mode == "step":
            create_args["queue_mode"] = "step"
        names = ", ".join(f"{k} => %({k})s" for k in create_args)
        conn.execute(f"select engine.create_flow({names})", create_args)
        for s in base.steps:
            conn.execute(
                "select engine.add_step(flow_slug => %s, step_slug => %s, deps => %s, "
                "max_attempts => %s, base_delay => %s, timeout => %s, start_delay => %s)",
                (
                    base.slug,
                    s.slug,
                    list(s.deps),
                    s.max_attempts,
                    s.base_delay,
                    s.timeout,
                    s.start_delay,
                ),
            )
    return True
