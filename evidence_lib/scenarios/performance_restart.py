"""Scenario 7, performance, continued: the restart soak. Hundreds of v2 runs per queue mode, 4
workers and a reconciler, handlers of 0.4 s, leases of 7 s, and the whole server crashed three
times (immediate, SIGKILL to the postmaster, immediate) for about 3.3 s each while work is in
flight (`restart_fault`). Skipped, and said, on a server this suite does not own."""

from __future__ import annotations

from evidence_lib import progress
from evidence_lib.pg import db
from evidence_lib.pg.db import Server, connect
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.performance_more import over_time
from evidence_lib.scenarios.restart_fault import run_restart
from evidence_lib.scenarios.support import consistency
from evidence_lib.scenarios.support.setup import modes, scenario_database

OUTAGE = 3.3  # seconds the server stays down each time
LEASE_TIMEOUT = 5  # seconds: lease = claim + 5 s + 2 s of grace


def restart_soak(result: ScenarioResult, server: Server, queue_modes: str, runs: int, hooks: str) -> None:
    if runs <= 0:
        return
    if server.control is None:
        result.notes.append(
            "restart soak skipped: the server was given by DATABASE_URL and is not this suite's to crash"
        )
        return
    table = []
    for mode in modes(queue_modes):
        progress.report(f"restart soak ({mode}): {runs} runs, 3 crashes")
        with scenario_database(server, hooks=hooks, prefix="restart") as url:
            with connect(url) as conn:  # a crash must not lose an acknowledged commit
                conn.execute(f"alter database {db.database_name(url)} set synchronous_commit = on")
            outcome = run_restart(
                url,
                server.control,
                mode,
                runs=runs,
                workers=4,
                crashes=("immediate", "kill9", "immediate"),
                outage=OUTAGE,
                handler_s=0.4,
                timeout=LEASE_TIMEOUT,
                deadline=240.0,
            )
            with connect(url) as conn:
                consistency.check(result, conn, mode, f"restart soak of {runs} runs")
        for name, (passed, detail) in outcome.gates.items():
            result.gate(f"restart soak: {name}", passed, detail, mode)
        table.append(
            {
                "mode": mode,
                "runs": runs,
                "crashes": ", ".join(c["kind"] for c in outcome.crashes),
                "outage_s": ", ".join(f"{c['outage_s']:.1f}" for c in outcome.crashes),
                "slowest_resume_s": round(outcome.resumed_within, 2),
                "longest_reconnect_wait_s": round(outcome.longest_reconnect_wait, 2),
                "takeovers": len(outcome.takeovers),
                "handler_reruns_after_takeover": sum(1 for t in outcome.takeovers if t["outcome"] == "taken_over"),
                "seconds": round(outcome.seconds, 1),
            }
        )
        result.append_rows("restart_resumes", [r | {"mode": mode} for r in outcome.resumes])
        over_time(
            result,
            f"restart_soak_over_time_{mode}",
            f"Restart soak ({mode} mode): throughput and latency, each server crash shaded",
            outcome.completions,
            [(c["crashed_at"], c["back_at"], "server crash") for c in outcome.crashes],
        )
    result.table("restart_soak", table)
