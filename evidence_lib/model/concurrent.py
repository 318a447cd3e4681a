"""Concurrent histories: two operations of the same run from two real sessions, their
interleaving forced at a hook point, and the outcome checked against the serial orders.

The first session parks at its operation's hook point (after it took the run's lock) while the
controller holds the hook's advisory lock; the second session starts and is proven blocked in
pg_locks (or finishes, when it needs no lock); then the first is released. The answers of both
and the database state afterwards must equal the model applying the two operations one after
the other, in the order the locks allowed or the other one (both are tried).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from evidence_lib.harness.faults import held_hook
from evidence_lib.harness.locks import waits
from evidence_lib.harness.sessions import HOOK_KEY_SPACE
from evidence_lib.model import ops
from evidence_lib.model.bench import History, ModelMismatch
from evidence_lib.model.observe import differences, snapshot
from evidence_lib.model.reference import Model, Outcome
from evidence_lib.pg.db import Conn, connect

DEADLINE = 10.0  # seconds for a session to park, block or finish
HOOKS = {"claim": "claim.after_run_lock", "settle": "settle.after_run_lock",
         "take_over": "take_over.after_run_lock", "reconcile": "reconcile.after_work_lock"}  # fmt: skip
PAIRS = {
    "claim vs claim": ("claim", "claim"),
    "settle vs the same settle": ("settle", "settle"),
    "settle vs a conflicting settle": ("settle", "settle_failed"),
    "settle vs take_over": ("settle", "take_over"),
    "take_over vs settle": ("take_over", "settle"),
    "claim vs reconcile": ("claim", "reconcile"),
    "settle vs reconcile": ("settle", "reconcile"),
}


def _op(machine: History, kind: str, run: str) -> ops.Op:
    model = machine.model
    r = model.runs[run]
    flow = model.flows[r.flow]
    claims = sorted(
        (c for c, v in model.claims.items() if v.run == run), key=lambda c: model.claims[c].state != "current"
    )
    if kind == "claim" or (kind != "reconcile" and not claims):
        queued = [s for s, t in r.tasks.items() if t.status == "queued"] or list(r.tasks)
        step = queued[-1]
        msg = machine.msg_ids.get((run, step))
        return ops.claim(run, step, flow.queues[step], [msg], msg, "right")
    if kind == "reconcile":
        return ops.reconcile(run, 8)
    claim_id = claims[0]
    c = model.claims[claim_id]
    if kind == "take_over":
        return ops.take_over(run, c.step, claim_id, flow.queues[c.step], machine.msg_ids.get((run, c.step)), "race")
    outcome = "failed" if kind == "settle_failed" else "completed"
    return ops.settle(claim_id, outcome, {"ok": 1} if outcome == "completed" else "boom", "race", run)


def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"within {DEADLINE:.0f} s: {what}")
        time.sleep(0.002)  # poll interval of an observation in pg_locks


def _parked(ctl: Conn, pid: int, key: int) -> bool:
    return any(w.locktype == "advisory" and w.classid == HOOK_KEY_SPACE and w.objid == key for w in waits(ctl, pid))


def race(machine: History, pair: str, run: str) -> Model:
    """Run the pair on two sessions (first parked at its hook point); return the model of the
    serial order that explains what the server answered and shows."""
    kinds = PAIRS[pair]
    first, second = _op(machine, kinds[0], run), _op(machine, kinds[1], run)
    point = HOOKS[first.name]
    answers: dict[int, tuple[Outcome, Any]] = {}
    proof = "the second needed no lock"
    with (connect(machine.url, application_name="model_ctl") as ctl,
          connect(machine.url, application_name="model_s1") as s1,
          connect(machine.url, application_name="model_s2") as s2):  # fmt: skip
        for session in (s1, s2):
            session.execute(f"set engine.clock_offset = '{machine.offset:.0f} seconds'")
        s1.execute("select set_config('engine.hooks', %s, false)", (point,))
        lo = machine.now()
        with held_hook(ctl, point) as key:
            t1 = threading.Thread(target=lambda: answers.__setitem__(1, first.real(s1)), daemon=True)
            t1.start()
            pid1 = s1.info.backend_pid
            _until(lambda: not t1.is_alive() or _parked(ctl, pid1, key), f"{first.text} parks at {point}")
            t2 = threading.Thread(target=lambda: answers.__setitem__(2, second.real(s2)), daemon=True)
            t2.start()
            pid2 = s2.info.backend_pid

            def blocked() -> bool:
                return any(pid1 in w.blocked_by for w in waits(ctl, pid2))

            _until(lambda: not t2.is_alive() or blocked(), f"{second.text} blocks or finishes")
            if t2.is_alive():
                proof = f"session 2 (pid {pid2}) proven waiting for session 1 (pid {pid1}) in pg_locks"
        t1.join(DEADLINE)
        t2.join(DEADLINE)
        if t1.is_alive() or t2.is_alive():
            raise AssertionError(f"a session of the race {pair} did not finish within {DEADLINE:.0f} s")
        window = (lo, machine.now())
    seen = snapshot(machine.conn)
    tried = []
    for order in ((1, 2), (2, 1)):
        for force in (False, True):
            model = machine.model.copy()
            out = {}
            for i in order:
                op = first if i == 1 else second
                model.force = {q: False for q in model.ambiguous} if force else {}
                out[i] = op.apply(model, answers[i][1], window)
            diff = differences(model.expected_state(), seen)
            if out[1] == answers[1][0] and out[2] == answers[2][0] and not diff:
                machine.transcript.append(
                    f"race {pair}: [1] {first.text} -> {answers[1][0].text()}; [2] {second.text} -> "
                    f"{answers[2][0].text()}; serial order {order} ({proof})"
                )
                machine.bench.coverage[(machine.state_of(run), f"race: {pair}", f"order {order[0]}-{order[1]}")] += 1
                machine.bench.steps += 2
                machine.learn_ids(seen)
                return model
            tried.append(f"order {order}: model {out[1].text()}, {out[2].text()}; {diff[:4]}")
    raise ModelMismatch(
        f"race {pair}: [1] {first.text} -> {answers[1][0].text()}; [2] {second.text} -> {answers[2][0].text()}; "
        "no serial order of the model explains it: " + " || ".join(tried)
    )
