"""The reconciler driver skips a run whose reconcile is refused and goes on with the others."""

from __future__ import annotations

from evidence_lib.engine import v2
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.pg.db import Conn
from evidence_lib.workers.reconciler import Reconciler
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
