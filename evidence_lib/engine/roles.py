"""The engine's roles and what each may execute (CONTRACT section 6): PUBLIC nothing, the worker
role the calls a worker makes, the operator role every other public function; both may wait for
wake-ups (v2_listen / v2_unlisten, docs/contract.md "Wake-ups")."""

from __future__ import annotations

from typing import Literal

Role = Literal["engine_worker", "engine_operator"]
WORKER_FUNCTIONS = frozenset(
    {"start_tasks", "complete_task", "fail_task", "v2_claim", "v2_settle", "v2_claim_all", "v2_settle_all"}
)
BOTH_ROLES = frozenset({"v2_listen", "v2_unlisten"})


def may_execute(role: str, function: str) -> bool:
    """Whether `role` ('public', 'engine_worker', 'engine_operator') may execute engine.`function`."""
    if role == "public" or function.startswith("_"):
        return False
    if function in BOTH_ROLES:
        return True
    return (function in WORKER_FUNCTIONS) == (role == "engine_worker")
