"""The probes: after the tour of every operation, the scripted checks a careful reviewer would
run by hand, each answer and the whole state after it compared with the model. Together with the
tour they are the mutation sweep's first net: definitions called directly, every role, the v1
engine, the v2 envelope at each limit, every test hook, the live definition changed behind the
engine's back, and every constraint, unique index and trigger of the schema."""

from __future__ import annotations

from evidence_lib.model import probes_defs, probes_groups, probes_roles, probes_schema, probes_v1, probes_v2
from evidence_lib.model.probes_defs import Checker


def probes(m: Checker) -> None:
    probes_defs.definitions(m)
    probes_roles.roles(m, engine_queue="defs", foreign_queue="taken")
    probes_v1.diamond(m)
    probes_v1.flat(m)
    probes_v2.envelope(m)
    probes_v2.hooks(m, "Env900")
    probes_v2.reconcile_next(m)
    probes_groups.group_sizes(m)
    probes_v2.wakeups(m, "Env900")
    probes_v2.inputs(m)
    probes_v2.step_options(m)
    probes_v1.two_roots(m)
    probes_v2._flow(m, "Tamper", {}, {})
    probes_v2.definition_changes(m, "Tamper")
    v1_runs = [r for r, v in m.model.runs.items() if v.protocol == "v1"]
    probes_v2.v2_calls_on_v1(m, v1_runs[0])
    active = next(r for r, v in m.model.runs.items() if v.flow == "Env900" and v.status == "started")
    probes_defs.locked_definitions(m, "Env900", active)
    for op in probes_schema.probes():
        m.check(op)
    probes_v1.pruning(m)
