"""Upgrading a populated v1 baseline database to the queue-identity and step-queue migrations."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from evidence_lib.engine import v1
from evidence_lib.engine.flows import Flow
from evidence_lib.engine.sqlstates import SqlState
from evidence_lib.pg import db, migrate
from evidence_lib.pg.db import Server, connect
from evidence_lib.workers.v1 import Worker
from tests.helpers import queue_messages, run, scalar, task

BASELINE = "0001_baseline.sql"


def _ids(conn: Any, queue: str) -> list[int]:
    return [m["msg_id"] for m in queue_messages(conn, queue)]


def test_populated_baseline_upgrades_and_in_flight_runs_finish(server: Server) -> None:
    with db.scratch_database(server, prefix="upgrade") as url:
        migrate.apply_migrations(url, upto=BASELINE)
        with connect(url) as c:
            c.execute("select engine.create_flow('Shop', base_delay => 0)")  # capitalized slug
            c.execute("select engine.add_step('Shop', 'a')")
            c.execute("select engine.add_step('Shop', 'b', array['a'])")
            queued = v1.start_flow(c, "Shop", {"run": "queued"})
            started = v1.start_flow(c, "Shop", {"run": "started"})
            halfway = v1.start_flow(c, "Shop", {"run": "halfway"})
            # the baseline claims with the queue name as given
            v1.start_tasks(
                c,
                "Shop",
                [task(c, started, "a")["message_id"], task(c, halfway, "a")["message_id"]],
            )
            v1.complete_task(c, halfway, "a", 0, {"a": 1})  # b queued in the old queue
            before = {r: task(c, r, "a")["message_id"] for r in (queued, started, halfway)}
            assert scalar(c, "select count(*) from pgmq.q_shop") == 3

        applied = migrate.apply_migrations(url)
        assert applied[0] == "0002_queue_identity.sql" and "0003_step_queues.sql" in applied

        with connect(url) as c:
            assert c.execute("select step_slug, queue_name from engine.steps order by 1").fetchall() == [
                ("a", "shop"),
                ("b", "shop"),
            ]
            assert scalar(c, "select queue_mode from engine.flows") == "flow"
            for r, mid in before.items():
                assert (task(c, r, "a")["queue_name"], task(c, r, "a")["message_id"]) == (
                    "shop",
                    mid,
                )
            assert task(c, halfway, "b")["queue_name"] == "shop"
            # the task started before the upgrade is reported by its (old) worker afterwards
            v1.complete_task(c, started, "a", 0, {"a": 2})
            flow: Flow[Any] = Flow("Shop", base_delay=0)
            flow.add("a", lambda x: {"a": 3}).add("b", lambda x: "b", deps=["a"])
            with Worker(url, flow) as w:
                assert w.queue == "shop"
                while w.poll(wait_for_handlers=True):
                    pass
            for r in (queued, started, halfway):
                assert run(c, r)["status"] == "completed", r
            assert queue_messages(c, "shop") == []


def test_a_new_constraint_violation_rolls_the_whole_migration_back(server: Server) -> None:
    with db.scratch_database(server, prefix="upgrade") as url:
        migrate.apply_migrations(url, upto=BASELINE)
        with connect(url) as c:
            for slug in ("Foo", "foo", "Bar", "BAR", "other"):
                c.execute("select engine.create_flow(%s)", (slug,))
                c.execute("select engine.add_step(%s, 'a')", (slug,))
            v1.start_flow(c, "Foo", {})
        with pytest.raises(migrate.MigrationError) as failure:
            migrate.apply_migrations(url)
        message = str(failure.value)
        assert "0002_queue_identity.sql" in message and SqlState.QUEUE_COLLISION in message
        assert "foo (flows Foo, foo)" in message and "bar (flows BAR, Bar)" in message
        with connect(url) as c:
            assert scalar(c, "select array_agg(file_name) from engine.schema_migrations") == [BASELINE]
            assert (
                scalar(
                    c,
                    "select count(*) from information_schema.columns where "
                    "table_schema = 'engine' and column_name = 'queue_name'",
                )
                == 0
            )
            assert scalar(c, "select count(*) from engine.flows") == 5  # nothing renamed


def test_the_engine_works_between_0002_and_0003(server: Server) -> None:
    """Each migration leaves a working engine, not only the last one."""
    with db.scratch_database(server, prefix="upgrade") as url:
        migrate.apply_migrations(url, upto="0002_queue_identity.sql")
        with connect(url) as c:
            c.execute("select engine.create_flow('Mid')")
            c.execute("select engine.add_step('Mid', 'a')")
            c.execute("select engine.add_step('Mid', 'b', array['a'])")
            assert scalar(c, "select array_agg(distinct queue_name) from engine.steps") == ["mid"]
            run_id = v1.start_flow(c, "Mid", {})
            for step in ("a", "b"):
                [g] = v1.start_tasks(c, "mid", [task(c, run_id, step)["message_id"]])
                v1.complete_task(c, run_id, g.step_slug, 0, step)
            assert run(c, run_id)["output"] == {"b": "b"}
            with pytest.raises(psycopg.Error) as refused:
                c.execute("select engine.create_flow('MID')")
            assert refused.value.sqlstate == SqlState.QUEUE_COLLISION
