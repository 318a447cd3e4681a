"""Locking: a row-locking clause removed or weakened one step (`for update` -> `for no key update`
-> `for share` -> `for key share`), and `skip locked` / `nowait` toggled."""

from __future__ import annotations

from collections.abc import Iterator

from pglast import ast
from pglast.enums import LockClauseStrength, LockWaitPolicy

from evidence_lib.mutation.families import ExprContext
from evidence_lib.mutation.sqltree import REMOVED, NodeChange, Removed, walk

WEAKER = {
    LockClauseStrength.LCS_FORUPDATE: LockClauseStrength.LCS_FORNOKEYUPDATE,
    LockClauseStrength.LCS_FORNOKEYUPDATE: LockClauseStrength.LCS_FORSHARE,
    LockClauseStrength.LCS_FORSHARE: LockClauseStrength.LCS_FORKEYSHARE,
}
NAMES = {
    LockClauseStrength.LCS_FORUPDATE: "ForUpdate",
    LockClauseStrength.LCS_FORNOKEYUPDATE: "ForNoKeyUpdate",
    LockClauseStrength.LCS_FORSHARE: "ForShare",
    LockClauseStrength.LCS_FORKEYSHARE: "ForKeyShare",
}
WAITS = {
    LockWaitPolicy.LockWaitBlock: (
        (LockWaitPolicy.LockWaitSkip, "SkipLockedAdded"),
        (LockWaitPolicy.LockWaitError, "NowaitAdded"),
    ),
    LockWaitPolicy.LockWaitSkip: ((LockWaitPolicy.LockWaitBlock, "SkipLockedRemoved"),),
    LockWaitPolicy.LockWaitError: ((LockWaitPolicy.LockWaitBlock, "NowaitRemoved"),),
}  # fmt: skip


def _drop(node: ast.Node) -> ast.Node | Removed:
    return REMOVED


def _strength(strength: LockClauseStrength):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node:
        assert isinstance(node, ast.LockingClause)
        node.strength = strength
        return node

    return build


def _wait(policy: LockWaitPolicy):  # type: ignore[no-untyped-def]
    def build(node: ast.Node) -> ast.Node:
        assert isinstance(node, ast.LockingClause)
        node.waitPolicy = policy
        return node

    return build


def locking(ctx: ExprContext) -> Iterator[NodeChange]:
    for path, node in walk(ctx.root):
        if not isinstance(node, ast.LockingClause) or node.strength is None or node.waitPolicy is None:
            continue
        name = NAMES[node.strength]
        yield NodeChange(f"{name}Removed", path, _drop, None)
        if node.strength in WEAKER:
            weaker = WEAKER[node.strength]
            yield NodeChange(f"{name}To{NAMES[weaker]}", path, _strength(weaker), None)
        for policy, label in WAITS[node.waitPolicy]:
            yield NodeChange(label, path, _wait(policy), None)
