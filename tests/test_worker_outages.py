"""Workers through an outage: settlement tries spread over the lease and never spinning, bounded
reconnects, the client rules by construction, the controlled takeover command, and a real
server crash and restart under work."""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest

from evidence_lib.bundle.cli import main
from evidence_lib.engine import v2
from evidence_lib.engine.flows import Flow, compile_flow
from evidence_lib.harness.ab_flow import define_ab, read_step_message
from evidence_lib.harness.waits import wait_for_lease_expiry
from evidence_lib.pg import db
from evidence_lib.pg.db import Conn, Server, connect, one
from evidence_lib.scenarios.restart_fault import run_restart
from evidence_lib.workers.config import WorkerConfig
from evidence_lib.workers.connections import ConnectionSource, ConnectionUnavailable, ReconnectPolicy
from evidence_lib.workers.reconciler import Reconciler
from evidence_lib.workers.settlement import RESERVE
from evidence_lib.workers.takeover import take_over_expired
from evidence_lib.workers.v2 import V2Worker

DEAD = "postgresql://postgres@/postgres?host=" + tempfile.mkdtemp(prefix="no-server-")  # nothing listens


def _grant(seconds: float) -> v2.Grant:
    lease = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)
    return v2.Grant(uuid.uuid4(), "A", 0, "q", 1, {}, uuid.uuid4(), lease)


def _plain() -> Flow[Any]:
    flow: Flow[Any] = Flow("dead", max_attempts=1)
    flow.add("A", lambda x: x)
    return flow


def test_a_settlement_against_an_absent_server_spreads_its_tries_and_ends_at_the_horizon() -> None:
    with V2Worker(DEAD, _plain(), config=WorkerConfig(concurrency=1)) as worker:
        grant = _grant(2.0)
        record = worker.settle(grant, "completed", {"x": 1})
    starts = [a.started_at for a in record.attempts]
    assert record.final == "deadline_exceeded"
    assert all(a.result == "unreachable" and not a.submitted for a in record.attempts)  # none counted
    assert 3 <= len(starts) <= 40  # spread, never spinning
    assert starts[-1] <= grant.lease_expires_at.timestamp()
    assert max(b - a for a, b in itertools.pairwise(starts)) <= 1.0 + 0.5  # capped pauses


def test_the_pause_between_tries_is_capped_and_waits_out_the_last_reserve() -> None:
    with V2Worker(DEAD, _plain(), config=WorkerConfig(concurrency=1)) as worker:
        assert all(0 < worker.retry_delay(t, 30.0) <= 1.0 for t in range(1, 200))
        assert worker.retry_delay(1, RESERVE / 2) == pytest.approx(RESERVE / 2)
        assert worker.retry_delay(5, 0.6) <= 0.6 - RESERVE + 1e-9


def test_a_connect_that_never_reached_the_server_is_not_a_submitted_attempt() -> None:
    source = ConnectionSource(DEAD, size=1, policy=ReconnectPolicy(initial=0.05, cap=0.2))
    with pytest.raises(ConnectionUnavailable), source.connection(timeout=0.5):
        pass
    assert source.outages.away_since is not None and source.outages.failed_connects >= 1
    with V2Worker(DEAD, _plain(), config=WorkerConfig(concurrency=1)) as worker:
        record = worker.settle(_grant(0.8), "completed", 1)
    assert not any(a.submitted for a in record.attempts)


def test_reconnect_waits_double_with_jitter_up_to_the_cap() -> None:
    policy = ReconnectPolicy(initial=0.05, cap=1.0)
    assert all(0.025 <= policy.delay(1) <= 0.05 for _ in range(50))
    assert all(0.5 <= policy.delay(n) <= 1.0 for n in range(6, 60) for _ in range(3))
    with pytest.raises(ValueError):
        ReconnectPolicy(connect_timeout=1)


def test_worker_connections_are_autocommit_and_read_committed_whatever_the_database_default(
    conn: Conn, db_url: str
) -> None:
    conn.execute(f"alter database {db.database_name(db_url)} set default_transaction_isolation = 'repeatable read'")
    source = ConnectionSource(db_url, size=1)
    with source.connection() as c:
        assert c.autocommit
        assert one(c, "show transaction_isolation") == "read committed"
    source.close()


def test_the_reconciler_logs_once_when_the_server_goes_and_never_per_retry(caplog: pytest.LogCaptureFixture) -> None:
    import threading

    driver = Reconciler(DEAD, poll_interval=0.01, name="lonely")
    thread = threading.Thread(target=driver.run)
    with caplog.at_level(logging.WARNING, logger="evidence_lib.reconciler"):
        thread.start()
        threading.Event().wait(2.0)  # the outage this test observes
        driver.stop()
        thread.join(10)
    away = [r for r in caplog.records if "went away" in r.getMessage()]
    assert len(away) == 1 and driver.source.outages.failed_connects >= 3
    assert len(caplog.records) <= 2


def _expired_run(conn: Conn, slug: str) -> tuple[Any, uuid.UUID]:
    flow = define_ab(conn, slug, "flow", timeout=1)
    run_id = v2.start_run(conn, slug, {"n": 1})
    grant = v2.claim(conn, run_id, "A", slug, read_step_message(conn, flow, "A", run_id))
    assert grant is not None
    wait_for_lease_expiry(conn, grant.claim_id)
    return flow, run_id


def test_the_takeover_command_lists_expired_claims_in_a_dry_run_and_changes_nothing(
    conn: Conn, db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _expired_run(conn, "tk")
    assert main(["takeover", "--expired", "--dry-run", "--database-url", db_url]) == 0
    assert "outcome=would_take_over" in capsys.readouterr().out
    assert one(conn, "select count(*) from engine.task_claims where state = 'current'") == 1


def test_the_takeover_command_refuses_to_take_over_without_handlers(db_url: str) -> None:
    assert main(["takeover", "--expired", "--database-url", db_url]) == 2


def test_a_takeover_runs_the_handler_for_the_new_claim_and_a_second_expiry_is_attention(
    conn: Conn, db_url: str
) -> None:
    flow, run_id = _expired_run(conn, "tk2")
    report = take_over_expired(db_url, flows={"tk2": flow})
    [taken] = report.outcomes
    assert taken.outcome == "taken_over" and taken.verdict == "accepted"
    assert (
        one(conn, "select status from engine.step_tasks where run_id = %s and step_slug = 'A'", (run_id,))
        == "completed"
    )
    hung: Flow[Any] = Flow("tk3", max_attempts=1, timeout=1)
    hung.add("A", lambda x: x).add("B", lambda x: x, deps=["A"])
    compile_flow(conn, hung)
    _, other = _expired_run(conn, "tk3")
    grant = v2.take_over(conn, other, "A", *_current(conn, other))
    assert grant is not None
    wait_for_lease_expiry(conn, grant.claim_id)
    [exhausted] = take_over_expired(db_url, flows={"tk3": hung}).outcomes
    assert exhausted.outcome == "attention" and "takeover" in exhausted.detail


def _current(conn: Conn, run_id: uuid.UUID) -> tuple[uuid.UUID, str, int]:
    row = conn.execute(
        "select claim_id, queue_name, message_id from engine.task_claims where run_id = %s and state = 'current'",
        (run_id,),
    ).fetchone()
    assert row is not None
    return row[0], row[1], row[2]


def test_a_server_crash_shorter_than_the_leases_costs_no_takeover_and_no_second_handler_run(server: Server) -> None:
    assert server.control is not None
    with db.scratch_database(server, prefix="restart") as url:
        from evidence_lib.pg import migrate

        migrate.apply_migrations(url)
        with connect(url) as c:  # this test server runs with synchronous_commit off
            c.execute(f"alter database {db.database_name(url)} set synchronous_commit = on")
        result = run_restart(url, server.control, "step", runs=30, crashes=("kill9",))
    red = {name: detail for name, (ok, detail) in result.gates.items() if not ok}
    assert red == {} and result.takeovers == []
    assert Path(server.control.data_dir, "postmaster.pid").exists()  # back up for the tests after this one
