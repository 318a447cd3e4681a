"""The reference model of the definition functions, called directly (not through the Python
client's idempotent compile): `create_flow`, `add_step` and `delete_flow`, each refusal with its
exact SQLSTATE, checked in the order the contract and the engine check them."""

from __future__ import annotations

import re
from typing import Any

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.model.state import FlowDef, Outcome, Run, StepDef

SLUG = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUEUE_LIMIT = 47


def valid_slug(slug: str | None) -> bool:
    return slug is not None and bool(SLUG.fullmatch(slug)) and len(slug) <= 128


def step_queue_name(flow: str, step: str, index: int) -> str:
    """CONTRACT 1: lower(flow)__lower(step) when it fits in 47 characters, else truncated with the index."""
    full = f"{flow.lower()}__{step.lower()}"
    if len(full) <= QUEUE_LIMIT:
        return full
    suffix = f"__{index}"
    return flow.lower()[: QUEUE_LIMIT - len(suffix)] + suffix


def _bad(*pairs: tuple[int | None, int]) -> bool:
    """SQL's `x < lo or ...` on nullable options: only a non-null option out of range refuses."""
    return any(value is not None and value < low for value, low in pairs)


class DefinitionRules:
    """Mixed into `Model`: it holds the flows, runs and queues these rules read and write."""

    flows: dict[str, FlowDef]
    runs: dict[str, Run]
    queues: dict[str, dict[tuple[str, str], str]]
    dropped: set[str]
    foreign: set[str]  # queues created in PGMQ outside the engine (lower-cased names)

    def locked(self, slug: str) -> bool:
        """A flow with a v2 run that is not terminal cannot change (DR011)."""
        return any(r.flow == slug and r.protocol == "v2" and r.status == "started" for r in self.runs.values())

    def pgmq_has(self, name: str) -> bool:
        return (name in self.queues and name not in self.dropped) or name in self.foreign

    def _reserve(self, flow: str, name: str) -> Outcome | None:
        name = name.lower()
        if any(f.slug.lower() == name and f.slug != flow for f in self.flows.values()):
            return Outcome.error(SqlState.QUEUE_COLLISION)
        if any(q == name and f.slug != flow for f in self.flows.values() for q in f.queues.values()):
            return Outcome.error(SqlState.QUEUE_COLLISION)
        own = self.flows.get(flow)
        owned = own is not None and (name in own.queues.values() or (own.mode == "flow" and own.slug.lower() == name))
        if self.pgmq_has(name) and not owned:
            return Outcome.error(SqlState.QUEUE_COLLISION)
        return None

    def _ensure_queue(self, name: str) -> None:
        if not self.pgmq_has(name):
            self.queues.setdefault(name, {})
            self.dropped.discard(name)

    def create_flow(self, slug: str | None, max_attempts: int | None, base_delay: int | None, timeout: int | None,
                    mode: str | None) -> Outcome:  # fmt: skip
        if not valid_slug(slug) or slug is None:
            return Outcome.error(SqlState.UNSUPPORTED_DEFINITION)
        if len(slug) > QUEUE_LIMIT:
            return Outcome.error(SqlState.UNSUPPORTED_DEFINITION)
        if max_attempts is None or base_delay is None or timeout is None or _bad((max_attempts, 1), (base_delay, 0),
                                                                                 (timeout, 1)):  # fmt: skip
            return Outcome.error(SqlState.UNSUPPORTED_DEFINITION)
        if mode not in ("flow", "step"):
            return Outcome.error(SqlState.UNSUPPORTED_DEFINITION)
        existing = self.flows.get(slug)
        if existing is not None:
            if (existing.max_attempts, existing.base_delay, existing.timeout, existing.mode) != (
                max_attempts, base_delay, timeout, mode
            ):  # fmt: skip
                return Outcome.error(SqlState.DEFINITION_LOCKED if self.locked(slug) else SqlState.DEFINITION_DIFFERS)
            return Outcome("value", existing.row())
        refused = self._reserve(slug, slug)
        if refused:
            return refused
        flow = FlowDef(slug, mode, "direct", {}, timeout, max_attempts, base_delay, {})
        self.flows[slug] = flow
        if mode == "flow":
            self._ensure_queue(slug.lower())
        return Outcome("value", flow.row())

    def add_step(self, flow_slug: str, slug: str | None, deps: list[str | None] | None, max_attempts: int | None,
                 base_delay: int | None, timeout: int | None, start_delay: int | None) -> Outcome:  # fmt: skip
        flow = self.flows.get(flow_slug)
        if flow is None:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        wanted = list(deps or [])
        if not valid_slug(slug) or slug is None or slug == "run" or None in wanted or slug in wanted:
            return Outcome.error(SqlState.UNSUPPORTED_DEFINITION)
        if len(set(wanted)) != len(wanted):
            return Outcome.error(SqlState.UNSUPPORTED_DEFINITION)
        if _bad((max_attempts, 1), (base_delay, 0), (timeout, 1), (start_delay, 0)):
            return Outcome.error(SqlState.UNSUPPORTED_DEFINITION)
        names = [str(d) for d in wanted]
        if slug in flow.queues:
            d = flow.step(slug)
            if sorted(d.deps) != sorted(names) or (d.max_attempts, d.base_delay, d.timeout, d.start_delay) != (
                max_attempts, base_delay, timeout, start_delay
            ):  # fmt: skip
                locked = self.locked(flow_slug)
                return Outcome.error(SqlState.DEFINITION_LOCKED if locked else SqlState.DEFINITION_DIFFERS)
            return Outcome("value", flow.step_row(slug))
        if self.locked(flow_slug):
            return Outcome.error(SqlState.DEFINITION_LOCKED)
        if any(n not in flow.queues for n in names):
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        index = len(flow.queues)
        if flow.mode == "step":
            route = step_queue_name(flow_slug, slug, index)
            refused = self._reserve(flow_slug, route)
            if refused:
                return refused
        else:
            route = flow_slug.lower()
        flow.queues[slug] = route
        flow.defs[slug] = StepDef(slug, tuple(names), max_attempts, base_delay, timeout, start_delay, index, route)
        if flow.mode == "step":
            self._ensure_queue(route)
        return Outcome("value", flow.step_row(slug))

    def delete_flow(self, slug: str) -> Outcome:
        flow = self.flows.get(slug)
        if flow is None:
            return Outcome.error(SqlState.UNKNOWN_OBJECT)
        if self.locked(slug):
            return Outcome.error(SqlState.DEFINITION_LOCKED)
        routes = set(flow.queues.values()) | ({slug.lower()} if flow.mode == "flow" else set())
        for run_id in [r for r, v in self.runs.items() if v.flow == slug]:
            self.forget_run(run_id)
        del self.flows[slug]
        for name in sorted(routes):
            if self.pgmq_has(name):
                self.dropped.add(name)
                self.foreign.discard(name)
                for run_id, step in self.queues.get(name, {}):
                    if run_id in self.runs:
                        self.runs[run_id].tasks[step].message = "gone"
                self.queues[name] = {}
        return Outcome("value", None)

    def forget_run(self, run_id: str) -> None:  # the model's Model removes a run and what hangs off it
        raise NotImplementedError


def describe(value: Any) -> str:
    return "SQL NULL" if value is None else repr(value)
