"""The tour: one scripted history per queue mode that runs every kind of operation at least once,
checked against the model exactly like a random history. Random histories explore; the tour makes
sure that every operation, refusal and fault the model knows is exercised in every run, whatever
the budget (a small `examples` cannot leave a lost acknowledgement or a poison untried).
"""

from __future__ import annotations

from evidence_lib.model import ops, ops_groups
from evidence_lib.model.concurrent import race
from evidence_lib.model.machine import EngineMachine

BIG = {"pad": "x" * 70_000}


def _claim(m: EngineMachine, run: str, step: str, variant: str = "right") -> str | None:
    flow = m.model.flows[m.model.runs[run].flow]
    msg = m.msg_ids.get((run, step))
    choices: dict[str, list[int | None]] = {
        "right": [msg],
        "wrong id": [(msg or 0) + 1000],
        "duplicate ids": [msg, msg],
    }
    ids = choices[variant]
    op = ops.claim(run, step, flow.queues[step], ids, msg, variant)
    op.meta["variant"] = variant
    before = set(m.model.claims)
    m.check(op)
    new = [c for c in m.model.claims if c not in before]
    return new[0] if new else None


def _settle(m: EngineMachine, claim: str, outcome: str, result: object, variant: str) -> None:
    op = ops.settle(claim, outcome, result, variant, m.model.claims[claim].run)
    op.meta["variant"] = variant
    m.check(op)


def _take_over(m: EngineMachine, claim: str) -> str | None:
    c = m.model.claims[claim]
    queue = m.model.flows[m.model.runs[c.run].flow].queues[c.step]
    before = set(m.model.claims)
    op = ops.take_over(c.run, c.step, claim, queue, m.msg_ids.get((c.run, c.step)), "current claim")
    op.meta["variant"] = "current claim"
    m.check(op)
    new = [x for x in m.model.claims if x not in before]
    return new[0] if new else None


def _groups(m: EngineMachine) -> None:
    """Two fresh runs claimed, settled and reconciled by one group call each, every group with a
    refusal inside (that must undo nothing of the others) and a duplicate."""
    for n in (2, 3):
        m.check(ops.start_run("m1", {"n": n}))
    # hi is given first everywhere: the engine must run lo's items first (ascending run id)
    lo, hi = sorted(list(m.model.runs)[-2:])
    queue = m.model.flows["m1"].queues["A"]
    a_lo, a_hi = m.msg_ids.get((lo, "A")), m.msg_ids.get((hi, "A"))
    before = set(m.model.claims)
    # run order: lo granted, hi refused, hi granted: no item's answer may leak into the next one's
    m.check(ops_groups.claim_all([(hi, "A", queue, (a_hi or 0) + 1000, a_hi), (lo, "A", queue, a_lo, a_lo),
                                  (hi, "A", queue, a_hi, a_hi)], "one wrong id"))  # fmt: skip
    c_lo, c_hi = (next(c for c in m.model.claims if c not in before and m.model.claims[c].run == r) for r in (lo, hi))
    unknown = "00000000-0000-4000-8000-000000000000"
    m.check(ops_groups.settle_all([(c_hi, "done", {}), (unknown, "completed", {}), (c_lo, "completed", {"ok": 4}),
                                   (c_hi, "completed", {"ok": 5})], "refusals"))  # fmt: skip
    m.check(ops_groups.settle_all([(c_lo, "completed", {"ok": 4})], "replay"))
    m.check(ops_groups.reconcile_all([hi, lo], 0))  # DR008: the whole group refused
    # dispatches both Bs, the duplicate a no-op; unknown runs first and last in run order (DR014
    # each, alone): a refusal's answer must not leak into a report, nor a report into a refusal
    last = "ffffffff-ffff-4fff-bfff-ffffffffffff"
    m.check(ops_groups.reconcile_all([hi, last, lo, unknown, hi], 8))


def tour(m: EngineMachine, mode: str, probes: bool = True) -> None:
    """Every operation of the model, in `mode`, on the machine's fresh database; then (in flow
    mode) the probes."""
    m.check(ops.define("m1", mode, "ab"))
    m.check(ops.define("m1", mode, "ab"))  # the same definition again: a no-op
    m.check(ops.define("m1", mode, "abc"))  # another definition of the same flow: refused
    m.check(ops.define("M1", mode, "ab"))  # a name that differs only in case: DR012
    m.check(ops.define("m2", mode, "abc"))  # outside the v2 envelope (accepted as a v1 definition)
    for slug, value, sql_null in (("m2", {"n": 1}, False), ("m1", None, True), ("m1", BIG, False), ("nope", {}, False)):
        m.check(ops.start_run(slug, value, sql_null))
    for _ in range(3):
        m.check(ops.start_run("m1", {"n": 1}))
    r1, r2, r3 = list(m.model.runs)
    flow = m.model.flows["m1"]
    m.check(ops.read(flow.queues["A"]))
    _claim(m, r1, "A", "wrong id")
    _claim(m, r1, "A", "duplicate ids")
    c1 = _claim(m, r1, "A")
    assert c1 is not None
    _take_over(m, c1)  # before the lease horizon: DR007
    if m.bench.transactional:  # one session: no transport to lose, the settlement simply lands
        _settle(m, c1, "completed", {"ok": 1}, "fresh")
    else:
        m.lost_ack(c1, "completed")
    _settle(m, c1, "completed", {"ok": 1}, "replay")  # the replay decides: replayed (or accepted)
    _settle(m, c1, "failed", "boom", "conflicting replay")
    m.check(ops.settle(c1, "done", {}, "unknown outcome", r1))
    m.check(ops.settle(c1, "completed", None, "sql_null", r1))  # DR009: JSON null is a result, SQL NULL is not
    m.check(ops.settle("00000000-0000-4000-8000-000000000000", "completed", {}, "unknown claim", None))
    m.check(ops.reconcile(r1, 0))  # DR008
    m.check(ops.reconcile(r1, 1))  # dispatches B
    m.check(ops.read(flow.queues["B"]))
    c2 = _claim(m, r1, "B")
    assert c2 is not None
    m.advance(40)
    c3 = _take_over(m, c2)  # past the horizon: the one controlled takeover
    _settle(m, c2, "completed", "late", "revoked claim")  # stale
    assert c3 is not None
    m.advance(40)
    _take_over(m, c3)  # no takeover left: attention, no grant
    m.check(ops.reconcile(r1, 8))  # attention: skipped
    _settle(m, c3, "completed", [], "fresh")  # settling is allowed under attention
    c4 = _claim(m, r2, "A")
    assert c4 is not None
    _settle(m, c4, "failed", "boom", "fresh")  # the run fails
    m.check(ops.reconcile(r2, 8))
    m.check(ops.v1_write(r2, "A", "complete"))
    m.check(ops.v1_write(r3, "B", "fail"))
    _groups(m)
    if not m.bench.transactional:  # two sessions cannot share one open transaction
        m.model = race(m, "claim vs claim", r3)
        m.model = race(m, "settle vs the same settle", r3)
    else:  # one session: r3's A claimed and settled plainly, so the poison below has a B to dispatch
        c5 = _claim(m, r3, "A")
        assert c5 is not None
        _settle(m, c5, "completed", {"ok": 1}, "fresh")
    m.check(ops.drop_queue(flow.queues["B"]))  # poison: B's dispatch fails from now on
    for _ in range(3):
        m.check(ops.reconcile(r3, 8))  # an error, then skipped in backoff...
        m.advance(100)  # ...until the backoff has passed; the third error is attention
    m.check(ops.reconcile(r3, 8))
    if probes and mode == "flow":
        from evidence_lib.model.probes import probes as run_probes

        run_probes(m)
