"""Two paths of the worker code that no other part runs: a worker's own reconciler, and the
controlled takeover an operator runs. Each is read back from the database afterwards.

`followup`: a pool whose workers reconcile the runs they settle (`WorkerConfig.reconcile_url`,
workers/followup.py) and no standalone reconciler at all: every run completes, and each
reconcile committed after the settlement it follows (the engine's history says so).

`operator_takeover`: a worker claims A and dies; once the lease has passed, the operator's
`take_over_expired` takes the claim over once and runs the handler for the new claim, whose
result settles; a second call finds nothing left to take over.
"""

from __future__ import annotations

import threading
import time

from evidence_lib.engine import v2
from evidence_lib.engine.flows import QueueMode, route
from evidence_lib.harness.ab_flow import define_ab, read_step_message, step_of
from evidence_lib.harness.waits import joined, wait_for_lease_expiry
from evidence_lib.pg.db import connect, one, rows
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.support import consistency
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.takeover import take_over_expired
from evidence_lib.workers.v2 import V2Worker

RUNS = 4
DEADLINE = 5.0  # seconds for the pool to finish RUNS runs (it takes a fraction of one)
STOPPED = 3.0  # seconds for every worker to stop after the request, together
STALL = 2.0  # seconds without a settlement or a reconcile before the wait gives up (a broken loop fails fast)
# every settlement raises a run's requested generation, every reconcile its processed one
PROGRESS = ("select coalesce(sum(w.requested_generation), 0)::text || '/' || coalesce(sum(w.processed_generation), 0) "
            "from engine.run_work w join engine.runs r using (run_id) where r.flow_slug = 'followup'")


def followup(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    with connect(url, application_name="followup") as conn:
        flow = define_ab(conn, "followup", mode)
        runs = [v2.start_run(conn, flow.slug, {"n": n}) for n in range(RUNS)]
        config = WorkerConfig(concurrency=4, poll_interval=0.05, wakeups=False, reconcile_url=url)
        steps = ["A", "B"] if mode == "step" else ["A"]
        pool = [V2Worker.serving(url, flow, step_of(flow, s), name=f"followup_{s}", config=config) for s in steps]
        threads = [threading.Thread(target=w.__enter__().run, kwargs={"handle_signals": False}, name=f"worker {i}")
                   for i, w in enumerate(pool)]  # fmt: skip
        for t in threads:
            t.start()
        done = "select count(*) from engine.runs where flow_slug = 'followup' and status = 'completed'"
        deadline, stalled = time.monotonic() + DEADLINE, ""
        try:
            last, moved_at = None, time.monotonic()
            while int(one(conn, done)) < RUNS and time.monotonic() < deadline:
                now = one(conn, PROGRESS)
                if now != last:
                    last, moved_at = now, time.monotonic()
                elif now != "0/0" and time.monotonic() - moved_at > STALL:  # work began, then stopped
                    stalled = f"; stalled: no settlement or reconcile for {STALL:.0f} s (generations {now})"
                    break
                time.sleep(0.02)  # poll the runs' state, bounded by DEADLINE (liveness, not an ordering)
        finally:
            for w in pool:
                w.request_shutdown()
            try:
                joined(threads, STOPPED)
            finally:
                for w in pool:
                    w.__exit__(None, None, None)
        completed = int(one(conn, done))
        reconciles = rows(
            conn,
            "select w.run_id, w.requested_generation, w.processed_generation from engine.run_work w "
            "join engine.runs r using (run_id) where r.flow_slug = 'followup' order by w.run_id",
        )
        errors = int(one(conn, "select count(*) from engine.engine_errors"))
        consistency.check(result, conn, mode, "runs completed by the workers' own reconcilers")
    clean = [r for r in reconciles if r["processed_generation"] == r["requested_generation"] >= 2]
    result.gate(
        "runs_complete_with_the_workers_own_reconciler",
        completed == RUNS and len(clean) == RUNS and errors == 0,
        f"{completed} of {len(runs)} runs completed within {DEADLINE:.0f} s with no standalone reconciler; "
        f"runs reconciled through A and B (processed = requested >= 2): {len(clean)}; engine errors {errors}"
        f"{stalled}",
        mode,
    )


def operator_takeover(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    with connect(url, application_name="operator") as conn:
        flow = define_ab(conn, "optake", mode, timeout=1)
        run_id = v2.start_run(conn, flow.slug, {"n": 1})
        queue = route(flow, "A")
        lost = v2.claim(conn, run_id, "A", queue, read_step_message(conn, flow, "A", run_id))
        assert lost is not None  # its worker dies here: the claim is never settled
        wait_for_lease_expiry(conn, lost.claim_id, timeout=10)
        listed = take_over_expired(url, flows={flow.slug: flow}, dry_run=True)
        taken = take_over_expired(url, flows={flow.slug: flow})
        again = take_over_expired(url, flows={flow.slug: flow})
        claims = rows(
            conn,
            "select c.claim_id, c.state, s.outcome, s.result from engine.task_claims c "
            "left join engine.task_settlements s using (claim_id) where c.run_id = %s and c.step_slug = 'A' "
            "order by c.claimed_at",
            (run_id,),
        )
        consistency.check(result, conn, mode, "an expired claim taken over by the operator")
    new = [o.new_claim for o in taken.outcomes]
    settled = [c for c in claims if c["outcome"] == "completed"]
    result.gate(
        "an_expired_claim_is_taken_over_once_and_its_result_settles",
        listed.count("would_take_over") == 1
        and taken.count("taken_over") == 1
        and len(again.outcomes) == 0
        and len(claims) == 2
        and claims[0]["claim_id"] == lost.claim_id
        and claims[0]["state"] != "current"
        and len(settled) == 1
        and settled[0]["claim_id"] in new,
        f"dry run: {', '.join(o.outcome for o in listed.outcomes) or 'nothing'}; then "
        f"{', '.join(f'{o.outcome} ({o.detail})' for o in taken.outcomes) or 'nothing'}; then "
        f"{len(again.outcomes)} more; A's claims in order (state/outcome): "
        + ", ".join(f"{c['state']}/{c['outcome'] or 'none'}" for c in claims),
        mode,
    )
