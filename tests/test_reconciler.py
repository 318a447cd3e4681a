"""The reconciler driver: it skips a run whose reconcile is refused and goes on with the others;
a pass makes at most `batch` calls, doubling the calls per round trip up to `pipeline`; the loop
reconciles what becomes due and returns its statistics."""

from __future__ import annotations

import threading
from uuid import UUID

from evidence_lib.engine import v2
from evidence_lib.engine.flows import route
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.pg.db import Conn, connect
from evidence_lib.workers.reconciler import Reconciler, ReconcilerStats
from tests.helpers import scalar
from tests.v2_helpers import claim_a, start


def test_a_refused_run_is_skipped_and_the_others_progress(conn: Conn, db_url: str) -> None:
    broken = start(conn, slug="broken")
    v2.settle(conn, claim_a(conn, broken).claim_id, "completed", 1)
    healthy = start(conn, slug="healthy")
    v2.settle(conn, claim_a(conn, healthy).claim_id, "completed", 1)
    conn.execute("update engine.steps set timeout = 9 where flow_slug = 'broken' and step_slug = 'B'")
    driver = Reconciler(db_url)
    driver.drain()
    assert driver.refused == {broken.run_id}
    assert any(SqlState.DEFINITION_CHANGED in e for e in driver.stats.errors)
    assert (
        scalar(conn, "select count(*) from engine.step_tasks where run_id = %s and step_slug = 'B'", (healthy.run_id,))
        == 1
    )
    assert v2.work_row(conn, healthy.run_id)["processed_generation"] == 1


def _settled_runs(conn: Conn, n: int, slug: str = "many") -> list[UUID]:
    """`n` runs of one A -> B flow, each with A settled: each is due for one reconcile."""
    flow = define_ab(conn, slug, "flow")
    runs = []
    for i in range(n):
        run_id = v2.start_run(conn, slug, {"n": i})
        grant = v2.claim(conn, run_id, "A", route(flow, "A"), read_step_message(conn, flow, "A", run_id))
        assert grant is not None
        v2.settle(conn, grant.claim_id, "completed", {"a": i})
        runs.append(run_id)
    return runs


def test_a_pass_makes_at_most_batch_calls_and_doubles_the_calls_per_round_trip(conn: Conn, db_url: str) -> None:
    runs = _settled_runs(conn, 7)
    driver = Reconciler(db_url, batch=5, pipeline=4)
    with connect(db_url) as c:
        assert driver.pass_once(c) == 5  # 1, then 2, then the 2 the batch has left: 3 round trips
        assert (driver.stats.passes, driver.stats.calls, driver.stats.round_trips) == (1, 5, 3)
        assert driver.pass_once(c) == 2  # 1, then 2 asked and 1 found: the pass ends
        assert (driver.stats.passes, driver.stats.calls, driver.stats.round_trips) == (2, 7, 5)
        assert driver.pass_once(c) == 0
        assert (driver.stats.passes, driver.stats.calls, driver.stats.round_trips) == (3, 7, 6)
    assert driver.stats.reports == {"clean": 7} and driver.stats.actions == 7 and not driver.stats.errors
    assert driver.backing_off == set() and driver.refused == set()
    for run_id in runs:
        assert v2.work_row(conn, run_id)["processed_generation"] == 1


def test_a_pipeline_of_one_makes_one_call_per_round_trip(conn: Conn, db_url: str) -> None:
    _settled_runs(conn, 3, slug="one")
    driver = Reconciler(db_url, pipeline=0)  # at least one
    with connect(db_url) as c:
        assert driver.pass_once(c) == 3
    assert driver.stats.round_trips == 4  # three runs, then one look that finds nothing


def test_the_loop_reconciles_what_becomes_due_and_returns_its_statistics(conn: Conn, db_url: str) -> None:
    driver = Reconciler(db_url, wakeups=False, poll_interval=0.01, name="t_loop")
    loop = threading.Thread(target=lambda: done.append(driver.run()), daemon=True)
    done: list[ReconcilerStats] = []
    loop.start()
    runs = _settled_runs(conn, 3, slug="loop")
    deadline = threading.Event()
    for _ in range(1000):  # a liveness guard of 10 s: a working loop is done in milliseconds
        if all(v2.work_row(conn, r)["processed_generation"] == 1 for r in runs):
            break
        deadline.wait(0.01)
    driver.stop()
    loop.join(10)
    assert done and done[0] is driver.stats
    assert driver.stats.calls == 3 and driver.stats.transport_errors == 0
    assert all(v2.work_row(conn, r)["processed_generation"] == 1 for r in runs)
