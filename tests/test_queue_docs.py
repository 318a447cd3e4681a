"""The copyable operator query in docs/queues.md runs and reports what happened."""

from __future__ import annotations

from typing import Any

from evidence_lib import PROJECT_ROOT
from evidence_lib.engine import v1
from evidence_lib.engine.flows import Flow, compile_flow, with_step_queues
from evidence_lib.pg.db import Conn
from evidence_lib.workers.v1 import Worker


def coverage_query() -> str:
    text = (PROJECT_ROOT / "docs" / "queues.md").read_text()
    block = text.split("<!-- coverage-query:start -->")[1].split("<!-- coverage-query:end -->")[0]
    return block.split("```sql")[1].split("```")[0]


def test_coverage_query_reports_per_step_queues(conn: Conn, db_url: str) -> None:
    flow: Flow[Any] = Flow("cover")
    flow.add("a", lambda x: 1).add("b", lambda x: 2, deps=["a"])
    staged = with_step_queues(flow)
    compile_flow(conn, staged)
    v1.start_flow(conn, "cover", {})
    v1.start_flow(conn, "cover", {})
    cols = [
        "flow",
        "step",
        "queue",
        "queued",
        "visible",
        "in_flight",
        "oldest",
        "waiting",
        "last_claim",
        "recent",
    ]
    rows = [dict(zip(cols, r, strict=True)) for r in conn.execute(coverage_query()).fetchall()]
    assert [(r["queue"], r["queued"], r["visible"], r["waiting"], r["recent"]) for r in rows] == [
        ("cover__a", 2, 2, 2, False),
        ("cover__b", 0, 0, 0, False),
    ]
    with Worker(db_url, staged, "a") as wa:
        wa.poll(wait_for_handlers=True)
    rows = [dict(zip(cols, r, strict=True)) for r in conn.execute(coverage_query()).fetchall()]
    a, b = rows
    assert (a["queued"], a["waiting"], a["recent"], a["in_flight"]) == (0, 0, True, 0)
    assert (b["queued"], b["visible"], b["waiting"], b["recent"]) == (2, 2, 2, False)
