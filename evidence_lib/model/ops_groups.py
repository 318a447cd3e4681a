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


def _answer(state: str | None, text: str | None, hit: bool, value: Any) -> Answer:
    """One row as the single call's answer. A row that mixes an error with an answer, or carries a
    message without its SQLSTATE, is an answer no single call gives (a value left over from the
    item before)."""
    if state is not None:
        return ("error", str(state)) if not hit else ("error and answer", (str(state), value))
    return ("message without error", text) if text is not None else ("value", value) if hit else ("empty", None)


def _ran(rows: list[tuple[Any, ...]]) -> tuple[int, ...]:
    """The items in the order the engine ran them (its rows' order)."""
    return tuple(int(r[0]) for r in rows)


def _expected(order: list[int], answers: list[Answer]) -> Outcome:
    return Outcome("value", (tuple(i + 1 for i in order), tuple(answers)))


def claim_all(items: list[ClaimItem], variant: str) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute(
                "select item, claim_id::text, input, sqlstate, message "
                "from engine.v2_claim_all(%s::uuid[], %s::text[], %s::text[], %s::bigint[])",
                ([i[0] for i in items], [i[1] for i in items], [i[2] for i in items], [i[3] for i in items]),
            ).fetchall()  # fmt: skip
            answers: list[Answer] = [("missing", None)] * len(items)
            claims: list[str | None] = [None] * len(items)
            for item, claim_id, input_, state, text in rows:
                answers[item - 1] = _answer(state, text, claim_id is not None, ("grant", _canon(input_)))
                claims[item - 1] = claim_id
            return Outcome("value", (_ran(rows), tuple(answers))), claims

        return call(conn, go)

    def model(m: Model, claims: Any, now: Window) -> Outcome:
        answers: list[Answer] = [("missing", None)] * len(items)
        order = _order([(0, item[0]) for item in items])
        for i in order:
            run, step, queue, sent, msg = items[i]
            claim_id = claims[i] if claims else None
            answers[i] = _alone(m, lambda: m.claim(run, step, queue, [sent], msg, now, claim_id))  # noqa: B023
        return _expected(order, answers)

    shown = ", ".join(f"{i[1]} of {i[0][:8]} ({i[2]} {i[3]})" for i in items)
    return Op("claim_all", f"claim_all [{shown}] ({variant})", real, model, items[0][0])


def settle_all(items: list[SettleItem], variant: str) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute(
                "select item, verdict, outcome, result, generation, sqlstate, message, claim_id::text "
                "from engine.v2_settle_all(%s::uuid[], %s::text[], %s::jsonb[])",
                ([c for c, _, _ in items], [o for _, o, _ in items], [Jsonb(r) for _, _, r in items]),
            ).fetchall()
            answers: list[Answer] = [("missing", None)] * len(items)
            for item, verdict, outcome, result, generation, state, text, claim in rows:
                if verdict is not None and claim != items[item - 1][0]:  # a receipt names its own claim
                    verdict = f"{verdict} (a receipt naming {claim})"
                answers[item - 1] = _answer(state, text, verdict is not None,
                                            (verdict, outcome, _canon(result), generation))  # fmt: skip
            return Outcome("value", (_ran(rows), tuple(answers))), None

        return call(conn, go)

    def model(m: Model, _ids: Any, now: Window) -> Outcome:
        answers: list[Answer] = [("missing", None)] * len(items)
        order = _order([(0, m.claims[c].run) if c in m.claims else (1, "") for c, _, _ in items])
        for i in order:
            claim_id, outcome, result = items[i]
            answers[i] = _alone(m, lambda: m.settle(claim_id, outcome, result, _size(result), False, now))  # noqa: B023
        return _expected(order, answers)

    shown = ", ".join(f"{c[:8]} {o}" for c, o, _ in items)
    return Op("settle_all", f"settle_all [{shown}] ({variant})", real, model)


def reconcile_all(runs: list[str], max_actions: int | None) -> Op:
    def real(conn: Conn) -> tuple[Outcome, Any]:
        def go() -> tuple[Outcome, Any]:
            rows = conn.execute(
                "select item, generation, actions, processed, health, run_status, sqlstate, message "
                "from engine.v2_reconcile_all(%s::uuid[], %s)",
                (runs, max_actions),
            ).fetchall()
            answers: list[Answer] = [("missing", None)] * len(runs)
            for item, generation, actions, processed, health, status, state, text in rows:
                answers[item - 1] = _answer(state, text, generation is not None,
                                            (generation, actions, processed, health, status))  # fmt: skip
            return Outcome("value", (_ran(rows), tuple(answers))), None

        return call(conn, go)

    def model(m: Model, _ids: Any, now: Window) -> Outcome:
        if max_actions is None or not 1 <= max_actions <= 64:
            return Outcome.error(SqlState.ARGUMENT_OUT_OF_RANGE)  # the whole group is refused
        answers: list[Answer] = [("missing", None)] * len(runs)
        order = _order([(0, run) for run in runs])
        for i in order:
            answers[i] = _alone(m, lambda: m.reconcile(runs[i], max_actions, now))  # noqa: B023
        return _expected(order, answers)

    shown = ", ".join(r[:8] for r in runs)
    return Op("reconcile_all", f"reconcile_all [{shown}] max_actions {max_actions}", real, model, runs[0])
