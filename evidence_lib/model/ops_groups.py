"""The group calls as operations of a history: `v2_claim_all`, `v2_settle_all` and
`v2_reconcile_all`, each judged against the model as the same single calls made one after
another in the engine's order (ascending run id, then the order given; a claim the engine does
not know settles last), where a call that raised changed nothing and undid no other."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg.types.json import Jsonb

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.model.ops import Op, _size, call
from evidence_lib.model.reference import Model, Outcome, Window, _canon
from evidence_lib.pg.db import Conn

Answer = tuple[str, Any]  # one item's answer: an Outcome's (kind, value)
ClaimItem = tuple[str, str, str, int | None, int | None]  # run, step, queue, the id sent, the real one
SettleItem = tuple[str, str, Any]  # claim, outcome, result


def _alone(m: Model, fn: Callable[[], Outcome]) -> Answer:
    """One item as the single call would answer it; a refusal leaves the model as it was (its
    subtransaction rolled back), keeping what the clock made ambiguous so far."""
    saved = m.copy()
    out = fn()
    if out.kind == "error":
        force, ambiguous = m.force, m.ambiguous
        m.__dict__.update(saved.__dict__)
        m.force, m.ambiguous = force, ambiguous
    return out.kind, out.value


def _order(keys: list[tuple[int, str]]) -> list[int]:
    """The positions in the engine's order: (rank, run id) ascending, then the position given."""
    return sorted(range(len(keys)), key=lambda i: (keys[i], i))


def _answer(state: str | None, hit: bool, value: Any) -> Answer:
    return ("error", str(state)) if state is not None else ("value", value) if hit else ("empty", None)


def claim_all(items: list[ClaimItem], variant: str) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute(
                "select item, claim_id::text, input, sqlstate from engine.v2_claim_all(%s::uuid[], %s::text[], "
                "%s::text[], %s::bigint[])",
                ([i[0] for i in items], [i[1] for i in items], [i[2] for i in items], [i[3] for i in items]),
            ).fetchall()  # fmt: skip
            answers: list[Answer] = [("missing", None)] * len(items)
            claims: list[str | None] = [None] * len(items)
            for item, claim_id, input_, state in rows:
                answers[item - 1] = _answer(state, claim_id is not None, ("grant", _canon(input_)))
                claims[item - 1] = claim_id
            return Outcome("value", tuple(answers)), claims

        return call(conn, go)

    def model(m: Model, claims: Any, now: Window) -> Outcome:
        answers: list[Answer] = [("missing", None)] * len(items)
        for i in _order([(0, item[0]) for item in items]):
            run, step, queue, sent, msg = items[i]
            claim_id = claims[i] if claims else None
            answers[i] = _alone(m, lambda: m.claim(run, step, queue, [sent], msg, now, claim_id))  # noqa: B023
        return Outcome("value", tuple(answers))

    shown = ", ".join(f"{i[1]} of {i[0][:8]} ({i[2]} {i[3]})" for i in items)
    return Op("claim_all", f"claim_all [{shown}] ({variant})", real, model, items[0][0])


def settle_all(items: list[SettleItem], variant: str) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute(
                "select item, verdict, outcome, result, generation, sqlstate "
                "from engine.v2_settle_all(%s::uuid[], %s::text[], %s::jsonb[])",
                ([c for c, _, _ in items], [o for _, o, _ in items], [Jsonb(r) for _, _, r in items]),
            ).fetchall()
            answers: list[Answer] = [("missing", None)] * len(items)
            for item, verdict, outcome, result, generation, state in rows:
                answers[item - 1] = _answer(state, True, (verdict, outcome, _canon(result), generation))
            return Outcome("value", tuple(answers)), None

        return call(conn, go)

    def model(m: Model, _ids: Any, now: Window) -> Outcome:
        answers: list[Answer] = [("missing", None)] * len(items)
        keys = [(0, m.claims[c].run) if c in m.claims else (1, "") for c, _, _ in items]
        for i in _order(keys):
            claim_id, outcome, result = items[i]
            answers[i] = _alone(m, lambda: m.settle(claim_id, outcome, result, _size(result), False, now))  # noqa: B023
        return Outcome("value", tuple(answers))

    shown = ", ".join(f"{c[:8]} {o}" for c, o, _ in items)
    return Op("settle_all", f"settle_all [{shown}] ({variant})", real, model)


def reconcile_all(runs: list[str], max_actions: int | None) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute(
                "select item, generation, actions, processed, health, run_status, sqlstate "
                "from engine.v2_reconcile_all(%s::uuid[], %s)",
                (runs, max_actions),
            ).fetchall()
            answers: list[Answer] = [("missing", None)] * len(runs)
            for item, generation, actions, processed, health, status, state in rows:
                answers[item - 1] = _answer(state, True, (generation, actions, processed, health, status))
            return Outcome("value", tuple(answers)), None

        return call(conn, go)

    def model(m: Model, _ids: Any, now: Window) -> Outcome:
        if max_actions is None or not 1 <= max_actions <= 64:
            return Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE)  # the whole group is refused
        answers: list[Answer] = [("missing", None)] * len(runs)
        for i in _order([(0, run) for run in runs]):
            answers[i] = _alone(m, lambda: m.reconcile(runs[i], max_actions, now))  # noqa: B023
        return Outcome("value", tuple(answers))

    shown = ", ".join(r[:8] for r in runs)
    return Op("reconcile_all", f"reconcile_all [{shown}] max_actions {max_actions}", real, model, runs[0])
