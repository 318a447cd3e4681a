"""Scenario 4, reconciliation, continued: wake-ups (docs/contract.md, "Wake-ups").

An idle pool (two workers per queue) and an idle reconciler register as waiters; their fallback
poll is 30 s, far past this part's deadline, so a run that completes within it completed on the
engine's notifications alone. Read back afterwards: the run is completed, no wait ended by its
fallback, each of the run's two messages woke exactly one worker (as many reads as messages, none
empty), each wake-up consumed the woken worker's registration, and A's message woke the worker
that had waited longest on A's queue.

Whether a wake-up consumed the registration is recorded when it happens, not inferred from the
rows left at the end: a woken worker that registers again and then finds work removes its own row
(`v2_unlisten`), so the end state depends on how the run and the worker's pauses interleave. A
trigger this part installs on its clone logs every deleted registration with the session that
deleted it; a consumed one was deleted by the notifier, never by its own session or not at all.
"""

from __future__ import annotations

import threading
import time

from evidence_lib.engine import v2
from evidence_lib.engine.flows import QueueMode, route
from evidence_lib.harness.ab_flow import define_ab, step_of
from evidence_lib.harness.waits import WaitTimeout, joined
from evidence_lib.pg.db import Conn, connect, one, rows
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.timing import CallTimes
from evidence_lib.workers.v2 import V2Worker
from evidence_lib.workers.wakeups import LINGER_POLLS

FALLBACK = 30.0  # every waiter's fallback poll: longer than any deadline below
REGISTERED = 3.0  # seconds for every waiter to register (workers start, connect and LISTEN)
DEADLINE = 3.0  # seconds a lone run may take on wake-ups (it takes milliseconds)
STOPPED = 3.0  # seconds for every worker and the reconciler to stop after the request, together
WORKERS_PER_QUEUE = 2


def _until(conn: Conn, query: str, want: int, what: str, timeout: float = DEADLINE) -> None:
    """Poll the database until `query` counts `want` (a liveness guard of seconds, orders nothing)."""
    deadline = time.monotonic() + timeout
    while int(one(conn, query)) != want:
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.01)


# this part's instrumentation (its clone only, never the engine): every deleted registration and
# the session that deleted it (the trigger runs as its owner, whoever deletes)
DELETIONS = """
create table public.wake_deletions (pid integer, channel text, listening_since timestamptz, deleted_by integer);
create function public.wake_deletion() returns trigger language plpgsql security definer
set search_path = pg_catalog, pg_temp as $$
begin
  insert into public.wake_deletions values (old.pid, old.channel, old.listening_since, pg_catalog.pg_backend_pid());
  return old;
end $$;
create trigger wake_deletions after delete on engine.listeners
  for each row execute function public.wake_deletion();
"""

# each registration made before the run (still there, or deleted) and who deleted it (null: nobody)
FATES = (
    "select l.pid, d.deleted_by from (select pid, channel, listening_since from engine.listeners "
    "union select pid, channel, listening_since from public.wake_deletions) as l "
    "left join public.wake_deletions as d using (pid, channel, listening_since) where l.listening_since < %s"
)


def _reads(pool: list[V2Worker]) -> int:
    return sum(len(w.timings.samples.get("pgmq.read", [])) for w in pool if w.timings is not None)


def wakeups(result: ScenarioResult, url: str, mode: QueueMode) -> None:
    with connect(url) as conn:
        flow = define_ab(conn, "wake", mode)
        conn.execute(DELETIONS)
    steps = ["A", "B"] if mode == "step" else ["A"]
    pool: list[V2Worker] = []
    for step in steps:
        for i in range(WORKERS_PER_QUEUE):
            config = WorkerConfig(concurrency=4, idle_wait=FALLBACK, poll_interval=FALLBACK)
            worker = V2Worker.serving(url, flow, step_of(flow, step), name=f"wake_{step}{i}", config=config)
            worker.timings = CallTimes()
            pool.append(worker)
    driver = Reconciler(url, idle_wait=FALLBACK, poll_interval=FALLBACK, name="wake_reconciler")
    threads = [threading.Thread(target=w.__enter__().run, kwargs={"handle_signals": False}, name=f"worker {i}")
               for i, w in enumerate(pool)]  # fmt: skip
    threads.append(threading.Thread(target=driver.run, name="reconciler"))
    a_channel = f"engine_queue_{route(flow, 'A')}"
    with connect(url, application_name="wake_observer") as conn:
        for t in threads:
            t.start()
        try:
            # registered, and done with the peek that follows the registration (idle after it): no
            # waiter finds the run's work by its own peek instead of a wake-up
            _until(conn, "select count(*) from engine.listeners as l join pg_stat_activity as a on a.pid = l.pid "
                         "where a.state = 'idle' and a.query not like '%v2_listen%'", len(pool) + 1,
                   "every waiter registered and waiting", REGISTERED)  # fmt: skip
            order = [int(r["pid"]) for r in rows(conn, "select pid from engine.listeners where channel = %s "
                                                       "order by listening_since, pid", (a_channel,))]  # fmt: skip
            reads_before = _reads(pool)
            since = one(conn, "select clock_timestamp()")
            started = time.perf_counter()
            run_id = v2.start_run(conn, flow.slug, {"wake": 1})
            try:
                _until(conn, f"select count(*) from engine.runs where run_id = '{run_id}' and status = 'completed'",
                       1, "the lone run completed")  # fmt: skip
                completed = True
            except WaitTimeout:
                completed = False
            seconds = time.perf_counter() - started
            fates = rows(conn, FATES, (since,))
        finally:
            for w in pool:
                w.request_shutdown()
            driver.stop()
            joined(threads, STOPPED)
    waiters = [w._waiter for w in pool if w._waiter is not None] + [driver.waiter]
    fallbacks = sum(w.fallbacks for w in waiters)
    result.gate(
        "a_lone_run_completes_on_wake_ups_not_the_fallback_poll",
        completed and fallbacks == 0,
        f"completed: {completed} in {seconds * 1000:.0f} ms (deadline {DEADLINE:.0f} s, every fallback poll "
        f"{FALLBACK:.0f} s); waits ended by a fallback: {fallbacks}",
        mode,
    )
    woken = sum(w._waiter.wakeups for w in pool if w._waiter is not None)
    reads = _reads(pool) - reads_before
    granted = sum(w.stats.granted for w in pool)
    result.gate(
        "each_message_wakes_exactly_one_idle_worker",
        (woken, granted) == (2, 2),
        f"the run sent 2 messages; worker wake-ups {woken}, claims granted {granted}, reads {reads} (the woken "
        f"worker looks again {LINGER_POLLS} times before it registers again; {WORKERS_PER_QUEUE} idle workers "
        "per queue: a broadcast would wake them all)",
        mode,
    )
    woken_pids = {pid for w in pool if w._waiter is not None and w._waiter.wakeups and (pid := w._waiter.pid)}
    # a woken waiter's registration from before the run, and whether a notifier (another session) deleted it
    woken_before = {int(r["pid"]): r["deleted_by"] not in (None, r["pid"]) for r in fates if r["pid"] in woken_pids}
    stale = sorted(pid for pid, consumed in woken_before.items() if not consumed)
    result.gate(
        "a_wake_up_consumes_the_registration",
        bool(woken_before) and not stale,
        f"waiters woken (pids): {sorted(woken_pids)}; of them registered before the run: {sorted(woken_before)}; "
        f"registrations no notifier deleted (still there, or removed by the waiter's own session): {stale}",
        mode,
    )
    first = next((w for w in pool if any(s.step_slug == "A" for s in w.stats.settlements)), None)
    got = None if first is None or first._waiter is None else first._waiter.pid
    result.gate(
        "the_worker_waiting_longest_is_woken",
        bool(order) and got == order[0],
        f"A's queue waiters by age (pids): {order}; A was claimed by the worker of pid {got}",
        mode,
    )
