"""The connection source every worker and reconciler uses (`workers/connections.py`), on a real
server: idle connections reused, at most `size` open, a bounded wait for a free one, a broken one
dropped with every idle one, a closed source refusing, and what it says of an outage."""

from __future__ import annotations

import logging
import threading

import psycopg
import pytest

from evidence_lib.pg.db import Conn, connect, one
from evidence_lib.workers.connections import ConnectionSource, ConnectionUnavailable, ReconnectPolicy

GUARD = 10.0  # seconds: a liveness guard only


def _backend(conn: Conn) -> int:
    return int(one(conn, "select pg_backend_pid()"))


def test_a_connection_given_back_is_the_one_taken_next(db_url: str) -> None:
    source = ConnectionSource(db_url, size=2, application_name="t_reuse")
    with source.connection(GUARD) as c:
        first = _backend(c)
    assert source.stats() == {"open": 1, "idle": 1, "failed_connects": 0}
    with source.connection(GUARD) as c:
        assert _backend(c) == first  # reused, not a new session
        assert source.stats()["idle"] == 0
    source.close()
    assert source.stats() == {"open": 0, "idle": 0, "failed_connects": 0}
    closed = "t_reuse: the connection source is closed"
    with pytest.raises(ConnectionUnavailable, match=closed), source.connection(GUARD):
        pass


def test_at_most_size_connections_and_a_waiter_gets_the_one_given_back(db_url: str) -> None:
    source = ConnectionSource(db_url, size=1, application_name="t_bound")
    with source.connection(GUARD) as held:
        with pytest.raises(ConnectionUnavailable, match="t_bound: no free connection in time"), source.connection(0.05):
            pass
        assert source.stats()["open"] == 1
        got: list[int] = []
        waiting = threading.Thread(target=lambda: _take_into(source, got), daemon=True)
        waiting.start()
        mine = _backend(held)
    waiting.join(GUARD)  # woken by the give-back, long before its own bound
    assert got == [mine]
    with connect(db_url) as admin:
        count = one(admin, "select count(*) from pg_stat_activity where application_name = 't_bound'")
    assert count == 1  # never a second session
    source.close()


def _take_into(source: ConnectionSource, got: list[int]) -> None:
    with source.connection(GUARD) as c:
        got.append(_backend(c))


def test_a_broken_connection_is_dropped_with_every_idle_one_and_the_outage_said_once(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    source = ConnectionSource(db_url, size=3, application_name="t_broken")
    with source.connection(GUARD) as a, source.connection(GUARD) as b:
        pids = {_backend(a), _backend(b)}
    assert source.stats() == {"open": 2, "idle": 2, "failed_connects": 0}
    with caplog.at_level(logging.WARNING, logger="evidence_lib.connections"):
        with pytest.raises(psycopg.OperationalError), source.connection(GUARD) as c:
            with connect(db_url) as admin:
                admin.execute("select pg_terminate_backend(%s, 5000)", (_backend(c),))
            c.execute("select 1")
        assert source.stats() == {"open": 0, "idle": 0, "failed_connects": 0}  # the idle one went too
        assert [e[1] for e in source.outages.events] == ["away"] and source.outages.away_since is not None
        with source.connection(GUARD) as c:  # the server is there: the next connect says it is back
            assert _backend(c) not in pids
        assert [e[1] for e in source.outages.events] == ["away", "back"] and source.outages.away_since is None
    said = [r.getMessage() for r in caplog.records if r.name == "evidence_lib.connections"]
    assert len(said) == 2 and "t_broken: lost the server" in said[0] and "t_broken: the server is back" in said[1]
    source.close()


def test_an_error_that_is_not_a_lost_connection_keeps_the_connection(db_url: str) -> None:
    source = ConnectionSource(db_url, size=1, application_name="t_kept")
    with pytest.raises(psycopg.errors.DivisionByZero), source.connection(GUARD) as c:
        pid = _backend(c)
        c.execute("select 1 / 0")
    assert source.stats() == {"open": 1, "idle": 1, "failed_connects": 0} and not source.outages.events
    with source.connection(GUARD) as c:
        assert _backend(c) == pid
    source.close()


def test_a_failed_connect_waits_its_backoff_within_the_callers_bound() -> None:
    dead = "postgresql://postgres@/postgres?host=/nonexistent-socket-dir"
    policy = ReconnectPolicy(connect_timeout=2, initial=5.0, cap=5.0)  # the next try is 2.5-5 s away
    source = ConnectionSource(dead, size=1, policy=policy, application_name="t_dead")
    with pytest.raises(ConnectionUnavailable, match="t_dead: cannot connect"), source.connection(GUARD):
        pass
    assert source.stats() == {"open": 0, "idle": 0, "failed_connects": 1}
    too_late = "the next connect is due after the caller's bound"
    # the backoff is longer than the caller may wait: refused at once, nothing tried
    with pytest.raises(ConnectionUnavailable, match=too_late), source.connection(1.0):
        pass
    assert source.stats()["failed_connects"] == 1  # nothing was tried
    assert len(source.outages.connects) == 1
    source.close()


def test_the_reconnect_policy_refuses_settings_out_of_range() -> None:
    for bad in ({"connect_timeout": 1}, {"initial": 0.0}, {"initial": 0.5, "cap": 0.25}):
        with pytest.raises(ValueError, match="reconnect policy out of range"):
            ReconnectPolicy(**bad)
    ReconnectPolicy(connect_timeout=2, initial=0.5, cap=0.5)  # a cap equal to the first wait is fine
    policy = ReconnectPolicy(initial=0.1, cap=10.0)
    for failures, ceiling in ((0, 0.1), (1, 0.1), (2, 0.2), (3, 0.4), (9, 10.0)):
        for _ in range(50):
            assert ceiling / 2 <= policy.delay(failures) <= ceiling
