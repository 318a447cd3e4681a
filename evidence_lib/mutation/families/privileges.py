"""Privileges: each grant removed, and each EXECUTE grant given to the other engine roles (a
worker that may reconcile, an operator that may settle)."""

from __future__ import annotations

from collections.abc import Iterator

from evidence_lib import PROJECT_ROOT
from evidence_lib.mutation.families import ObjectPatch
from evidence_lib.mutation.sources import Engine


def grants(engine: Engine) -> Iterator[ObjectPatch]:
    held = {(g.privilege, g.target, g.grantee) for g in engine.grants}
    for g in engine.grants:
        text = (PROJECT_ROOT / g.file).read_text()[g.start : g.end]
        on = g.target.lower()
        is_function = g.target.startswith("FUNCTION")
        fn = (g.target.split(" ", 1)[1].split("(")[0].removeprefix("engine."),) if is_function else ()
        yield ObjectPatch("GrantRemoved", g.label, g.file, g.start, g.end, text, f"(no {g.label})",
                          f"revoke {g.privilege.lower()} on {on} from {g.grantee};", fn)  # fmt: skip
        if g.privilege != "EXECUTE":
            continue
        for role in engine.roles:
            if role != g.grantee and ("EXECUTE", g.target, role) not in held:
                yield ObjectPatch("GrantedToOtherRole", g.label, g.file, g.start, g.end, text,
                                  f"{g.label}, and to {role}", f"grant execute on {on} to {role};", fn)  # fmt: skip

