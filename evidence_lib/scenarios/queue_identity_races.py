"""Scenario 5, queue identity, continued: definitions of one queue name in two sessions at once.

In each race `first` makes a definition and keeps its transaction open, then `second` makes one
that wants the same queue name: the same flow again (`Same`), a flow whose name collides only by
case (`Race`, then `race`), and a step whose private queue name collides with another flow's
step (`a__b`.`c` and `a`.`b__c`, both `a__b__c`). The contract serializes definitions of a name
on a transaction advisory lock per name (key space 7100): `second` must be seen waiting on exactly
that lock, held by `first` (`pg_locks`, `pg_blocking_pids`); once `first` commits, the same flow
is returned as it is and a collision is refused with DR012 naming who holds the name. Orderings
are forced by the locks and observed, never slept.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.locks import LockWait
from evidence_lib.harness.sessions import Controller, Session
from evidence_lib.pg.db import Conn, connect
from evidence_lib.results.scenario import ScenarioResult

NAME_KEY_SPACE = 7100  # the contract's advisory locks on queue names


def _call(sql: str, *args: Any) -> Callable[[Conn], psycopg.Error | None]:
    def step(conn: Conn) -> psycopg.Error | None:
        try:
            conn.execute(sql.encode(), args)
            return None
        except psycopg.Error as exc:
            return exc

    return step


@dataclass
class Race:
    name: str
    setup: list[str]  # committed before the race
    first: str
    second: str
    holder: str  # "" when the second must succeed; else who the refusal must name


STEP_FLOWS = [
    "select engine.create_flow('a__b', queue_mode => 'step')",
    "select engine.create_flow('a', queue_mode => 'step')",
    "select engine.add_step('a', 'x')",
]
RACES = (
    Race("same flow twice", [], "select engine.create_flow('Same')", "select engine.create_flow('Same')", ""),
    Race("flow names colliding by case", [], "select engine.create_flow('Race')",
         "select engine.create_flow('race')", "Race"),
    Race("private step queue names colliding", STEP_FLOWS, "select engine.add_step('a__b', 'c')",
         "select engine.add_step('a', 'b__c', array['x'])", "a__b"),
)  # fmt: skip


def _race(url: str, race: Race) -> tuple[psycopg.Error | None, list[LockWait], psycopg.Error | None, int]:
    with connect(url) as conn:
        for sql in race.setup:
            conn.execute(sql.encode())
    controller = Controller(url)
    first, second = Session(url, "define_first"), Session(url, "define_second")
    controller.members = {first.pid, second.pid}  # only waits the race forces count (autovacuum's do not)
    try:
        first.send(lambda c: c.execute("begin")).result(5)
        held = first.send(_call(race.first)).result(5)
        attempt = second.send(_call(race.second))
        proof = controller.settle(second, attempt) or []
        first.send(lambda c: c.execute("commit")).result(5)
        return held, proof, attempt.result(controller.timeout), first.pid
    finally:
        first.close()
        second.close()
        controller.close()


def concurrent_definitions(result: ScenarioResult, url: str) -> None:
    rows, serialized, answered = [], True, True
    for race in RACES:
        held, proof, second, first_pid = _race(url, race)
        on_the_name = [w for w in proof if w.locktype == "advisory" and w.classid == NAME_KEY_SPACE
                       and first_pid in w.blocked_by]  # fmt: skip
        message = "" if second is None else str(second.diag.message_primary)
        if race.holder:
            right = (second is not None and second.sqlstate == SqlState.QUEUE_COLLISION
                     and f"is taken by flow {race.holder}" in message)  # fmt: skip
        else:
            right = second is None
        serialized &= held is None and bool(on_the_name)
        answered &= right
        rows.append({
            "race": race.name, "first": race.first, "first_answer": "ok" if held is None else str(held.sqlstate),
            "second": race.second,
            "second_waited_on": "; ".join(w.describe({first_pid: "first"}) for w in proof) or "nothing",
            "second_answer": "ok" if second is None else f"[{second.sqlstate}] {message}",
        })  # fmt: skip
    result.table("concurrent_definitions", rows)
    summary = "; ".join(f"{r['race']}: waited on {r['second_waited_on']}, then {r['second_answer']}" for r in rows)
    result.gate("colliding_definitions_serialize_on_the_name_lock", serialized, summary)
    result.gate("after_the_wait_the_same_flow_is_returned_and_a_collision_refused_naming_the_holder", answered,
                summary)  # fmt: skip
