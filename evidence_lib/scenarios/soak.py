"""The soak: N v2 workers and M reconciler drivers over K runs, with real faults injected at a
rate: lost acknowledgements (the workers talk through a LostAckProxy that is re-armed after
every `1 / rate` settlements) and takeovers (a `rate` share of A handlers hangs past its lease;
an operator thread runs the controlled takeover, which re-runs the handler and settles).
Everything is read back afterwards: every run terminal, no task, message or settlement
duplicated, handler effects exactly once except where a takeover re-ran a handler (at least
once, by design), deadlocks unchanged.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from evidence_lib import progress
from evidence_lib.engine import v2
from evidence_lib.engine.flows import Flow, QueueMode, compile_flow, route, with_step_queues
from evidence_lib.engine.jsontypes import Json
from evidence_lib.harness.faults import LostAckProxy, xact_status
from evidence_lib.pg.db import connect, one, rows
from evidence_lib.scenarios.support.readback import deadlock_count, message_facts, timeline
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.settlement import SettlementRecord
from evidence_lib.workers.takeover import take_over_expired
from evidence_lib.workers.v2 import V2Worker

LEASE_TIMEOUT = 1  # seconds: A hangs past claim + 1 s + 2 s of grace


@dataclass
class SoakResult:
    mode: QueueMode
    runs: int
    workers: int
    reconcilers: int
    rate: float
    seconds: float = 0.0
    facts: dict[str, Any] = field(default_factory=dict)
    deadlocks_before: int = 0
    deadlocks_after: int = 0
    completions: list[tuple[float, float]] = field(default_factory=list)  # (wall time, run ms)
    faults: list[tuple[float, float, str]] = field(default_factory=list)  # (from, to, kind)

    @property
    def gates(self) -> dict[str, tuple[bool, str]]:
        f, n = self.facts, self.runs
        return {
            "every_run_terminal": (
                f["not_terminal"] == 0 and f["completed"] == n,
                f"{f['completed']}/{n} completed, {f['not_terminal']} not terminal",
            ),
            "no_duplicated_task": (f["tasks"] == 2 * n and f["duplicate_tasks"] == 0, f"{f['tasks']} tasks"),
            "no_duplicated_message": (
                f["archived"] == 2 * n and f["left"] == 0 and f["duplicate_messages"] == 0,
                f"{f['archived']} archived, {f['left']} left, {f['duplicate_messages']} dup",
            ),
            "one_settlement_per_task": (f["settlements"] == 2 * n, f"{f['settlements']} settlements"),
            "handler_effects_once_unless_taken_over": (
                f["effects_not_once"] == 0 and f["taken_over_effects_ok"],
                f"tasks with effects != 1 outside takeovers: {f['effects_not_once']}; taken over: {f['takeovers']}",
            ),
            "lost_acks_resolved_by_server_truth": (
                f["lost_acks"] > 0 and f["lost_acks_consistent"] == f["lost_acks"],
                f"{f['lost_acks']} commits lost their reply; the outcome agreed with pg_xact_status "
                f"(committed -> its one settlement stored, never accepted again; aborted -> never a replay) "
                f"{f['lost_acks_consistent']} times",
            ),
            "takeovers_recovered": (
                f["takeovers"] > 0 and f["revoked"] == f["takeovers"],
                f"{f['takeovers']} takeovers, {f['revoked']} claims revoked",
            ),
            "no_deadlock": (
                self.deadlocks_after == self.deadlocks_before,
                f"pg_stat_database.deadlocks {self.deadlocks_before} -> {self.deadlocks_after}",
            ),
        }


def _flow(url: str, mode: QueueMode, rate: float) -> Any:
    hung: set[str] = set()

    def effect(step: str, payload: Json) -> Json:
        assert isinstance(payload, dict)
        run_input = payload.get("run", payload)
        assert isinstance(run_input, dict)
        with connect(url, application_name="soak_handler") as c:
            c.execute("insert into soak_effects (run_id, step) values (%s, %s)", (str(run_input["id"]), step))
        if step == "A" and run_input.get("hang") and str(run_input["id"]) not in hung:
            hung.add(str(run_input["id"]))  # the first run hangs; the takeover's re-run does not
            time.sleep(LEASE_TIMEOUT + 2.5)  # hangs past its lease: the claim will be taken over
        return {"step": step}

    flow: Flow[Any] = Flow("soak", max_attempts=1, timeout=LEASE_TIMEOUT)
    flow.add("A", lambda p: effect("A", p)).add("B", lambda p: effect("B", p), deps=["A"])
    return with_step_queues(flow) if mode == "step" else flow


def _operator(url: str, flow: Any, stop: threading.Event, taken: list[UUID]) -> None:
    """The controlled takeover an operator runs (`take_over_expired`), every 0.2 s."""
    while not stop.is_set():
        report = take_over_expired(url, flows={"soak": flow})
        taken += [o.new_claim for o in report.outcomes if o.outcome == "taken_over" and o.new_claim]
        stop.wait(0.2)


def _chaos(proxy: LostAckProxy, url: str, every: int, stop: threading.Event) -> None:
    """Re-arm the proxy after every `every` settlements: a share of commits lose their reply."""
    with connect(url, application_name="soak_chaos") as conn:
        while not stop.is_set():
            proxy.arm()
            while not stop.is_set() and not proxy.fired:
                stop.wait(0.01)
            base = int(one(conn, "select count(*) from engine.task_settlements"))
            while not stop.is_set() and int(one(conn, "select count(*) from engine.task_settlements")) < base + every:
                stop.wait(0.02)


def _agrees_with_the_server(conn: Any, record: SettlementRecord) -> bool:
    """A settlement whose COMMIT lost its reply, judged by the server's truth (Jepsen's rule: the
    client's word on an indeterminate operation is not evidence): committed -> the claim has its
    one settlement with what was sent, and the client never saw it accepted a second time;
    aborted -> the client never saw a replay of it (there was nothing to replay). Running out of
    the lease before the resubmission finished is an allowed last word either way."""
    xid = next(a.xid for a in record.attempts if a.indeterminate)
    truth = xact_status(conn, str(xid))
    stored = rows(conn, "select outcome, result from engine.task_settlements where claim_id = %s", (record.claim_id,))
    if truth == "committed":
        sent = [{"outcome": record.outcome, "result": record.result}]
        return stored == sent and record.final in ("replayed", "deadline_exceeded")
    return truth == "aborted" and record.final in ("accepted", "stale", "deadline_exceeded")


def _started(conn: Any) -> int:
    return int(one(conn, "select count(*) from engine.runs where status = 'started'"))


FACTS = """
select (select count(*) from engine.runs where status not in ('completed', 'failed')) as not_terminal,
       (select count(*) from engine.runs where status = 'completed') as completed,
       (select count(*) from engine.step_tasks) as tasks,
       (select count(*) - count(distinct (run_id, step_slug)) from engine.step_tasks) as duplicate_tasks,
       (select count(*) from engine.task_settlements) as settlements,
       (select count(*) from engine.task_claims where state = 'revoked') as revoked
"""


def run_soak(
    url: str,
    mode: QueueMode = "flow",
    *,
    runs: int = 1000,
    workers: int = 4,
    reconcilers: int = 2,
    rate: float = 0.02,
    timeout: float = 300.0,
) -> SoakResult:
    result = SoakResult(mode, runs, workers, reconcilers, rate)
    flow = _flow(url, mode, rate)
    with connect(url, application_name="soak") as conn:
        conn.execute("create table soak_effects (id bigserial primary key, run_id text not null, step text not null)")
        compile_flow(conn, flow)
        with conn.transaction():
            hangs = max(1, round(rate * runs)) if rate > 0 else 0  # exactly this many A handlers hang
            every = max(1, runs // max(hangs, 1))
            for i in range(runs):
                v2.start_run(conn, "soak", {"id": i, "hang": i % every == 0 and i // every < hangs})
        result.deadlocks_before = deadlock_count(url)
        stop = threading.Event()
        taken_claims: list[UUID] = []
        steps: list[str | None] = [None] if mode == "flow" else ["A", "B"]
        with LostAckProxy(url) as proxy:
            pool = [
                V2Worker.serving(
                    proxy.url,
                    flow,
                    steps[i % len(steps)],
                    name=f"soak_worker_{i}",
                    config=WorkerConfig(concurrency=4, poll_interval=0.01, visibility_timeout=5),
                )
                for i in range(max(workers, len(steps)))
            ]
            drivers = [Reconciler(url, poll_interval=0.01, name=f"soak_reconciler_{i}") for i in range(reconcilers)]
            threads = [threading.Thread(target=w.__enter__().run, kwargs={"handle_signals": False}) for w in pool]
            threads += [threading.Thread(target=d.run) for d in drivers]
            threads += [
                threading.Thread(target=_operator, args=(url, flow, stop, taken_claims)),
                threading.Thread(target=_chaos, args=(proxy, url, max(1, round(1 / rate)), stop)),
            ]
            started = time.perf_counter()
            for t in threads:
                t.start()
            try:
                deadline = time.monotonic() + timeout
                while (left := _started(conn)) and time.monotonic() < deadline:
                    progress.report(f"soak ({mode})", runs - left, runs)
                    stop.wait(0.1)  # progress poll
            finally:
                result.seconds = time.perf_counter() - started
                stop.set()
                for w in pool:
                    w.request_shutdown()
                for d in drivers:
                    d.stop()
                for t in threads:
                    t.join(30)
            drops = [e.detail for e in proxy.events if e.event == "reply_dropped"]
            result.faults += [(e.at, e.at, "lost acknowledgement") for e in proxy.events if e.event == "reply_dropped"]
        result.deadlocks_after = deadlock_count(url)
        f: dict[str, Any] = rows(conn, FACTS)[0] | message_facts(conn, sorted({route(flow, "A"), route(flow, "B")}))
        # a task whose claim was revoked ran its handler under the old claim and again under the
        # takeover's: one or two effects, read from the claims the engine revoked
        taken = {
            (str(r[0]), str(r[1]))
            for r in conn.execute(
                "select distinct r.input->>'id', c.step_slug from engine.task_claims c join engine.runs r "
                "using (run_id) where c.state = 'revoked'"
            ).fetchall()
        }
        counts = conn.execute("select run_id, step, count(*) from soak_effects group by 1, 2").fetchall()
        f["effects_not_once"] = sum(1 for r, s, n in counts if n != 1 and (r, s) not in taken)
        f["taken_over_effects_ok"] = all(1 <= n <= 2 for r, s, n in counts if (r, s) in taken)
        settlements = [s for w in pool for s in w.stats.settlements]
        lost = [s for s in settlements if any(a.indeterminate for a in s.attempts)]
        f.update(
            takeovers=len(taken_claims),
            lost_acks=len(lost),
            lost_acks_replayed=sum(1 for s in lost if s.final == "replayed"),
            late_settlements=sum(1 for s in settlements if s.final in ("stale", "deadline_exceeded")),
        )
        f["lost_acks_consistent"] = sum(1 for s in lost if _agrees_with_the_server(conn, s))
        f["proxy_drops"] = sorted(set(drops))
        result.facts = f
        result.completions, takeovers = timeline(conn)
        result.faults += [(a, b, "takeover (lease expired -> revoked)") for a, b in takeovers]
    return result
