"""The waiter every idle worker and reconciler uses (`workers/wakeups.py`), on the real engine:
it lingers before it registers, registers once per idle period and peeks, is woken by a
notification on its own channel (and by no other payload), falls back after its bound, leaves
the registration when busy, and says False when the server is away."""

from __future__ import annotations

from evidence_lib.pg.db import Conn, connect, one
from evidence_lib.workers.wakeups import LINGER_INTERVAL, LINGER_POLLS, Waiter

CHANNEL = "engine_v2_dirty"  # always a known channel (a queue's needs a step that uses the queue)
DEAD = "postgresql://postgres@/postgres?host=/nonexistent-socket-dir"


class Pauses:
    """The owner's pause: records each one instead of sleeping."""

    def __init__(self) -> None:
        self.seen: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.seen.append(seconds)


def _never() -> bool:
    return False


def _registered(conn: Conn, waiter: Waiter) -> int:
    return int(one(conn, "select count(*) from engine.listeners where channel = %s and pid = %s",
                   (CHANNEL, waiter.pid)))  # fmt: skip


def _lingered(waiter: Waiter) -> Pauses:
    pauses = Pauses()
    for _ in range(LINGER_POLLS):
        assert waiter.wait(5.0, _never, pauses) is True
    assert pauses.seen == [LINGER_INTERVAL] * LINGER_POLLS
    return pauses


def test_a_waiter_lingers_then_registers_once_and_falls_back_after_its_bound(conn: Conn, db_url: str) -> None:
    waiter = Waiter(db_url, CHANNEL, "t_wait", lambda c: False)
    _lingered(waiter)
    assert waiter.conn is None and waiter.registrations == 0  # a busy pool never registers
    assert waiter.wait(0.05, _never, Pauses()) is False  # nothing came: the fallback
    assert (waiter.registrations, waiter.fallbacks, waiter.wakeups, waiter.waiting) == (1, 1, 0, True)
    assert _registered(conn, waiter) == 1
    assert waiter.wait(0.05, _never, Pauses()) is False  # still registered: no second v2_listen
    assert (waiter.registrations, waiter.fallbacks) == (1, 2)
    waiter.close()
    assert waiter.conn is None and not waiter.waiting


def test_a_notification_on_its_own_channel_wakes_it_and_another_payload_does_not(conn: Conn, db_url: str) -> None:
    waiter = Waiter(db_url, CHANNEL, "t_wake", lambda c: False)
    _lingered(waiter)
    assert waiter.wait(0.05, _never, Pauses()) is False  # registered now
    with connect(db_url) as other:
        other.execute("select pg_notify(%s, %s)", (f"engine_wake_{waiter.pid}", "engine_queue_someone_else"))
    assert waiter.wait(0.3, _never, Pauses()) is False  # not its payload: the fallback again
    assert waiter.wakeups == 0
    with connect(db_url) as other:
        other.execute("select pg_notify(%s, %s)", (f"engine_wake_{waiter.pid}", CHANNEL))
    assert waiter.wait(10.0, _never, Pauses()) is True
    assert (waiter.wakeups, waiter.waiting) == (1, False)  # the engine consumed the registration
    assert waiter.wait(0.05, _never, Pauses()) is False
    assert waiter.registrations == 2  # idle again: it registers again
    waiter.close()


def test_work_found_by_the_peek_at_registration_ends_the_wait(conn: Conn, db_url: str) -> None:
    for pipelined in (False, True):
        peeks: list[int] = []

        def peek(c: Conn, peeks: list[int] = peeks) -> bool:
            peeks.append(c.info.backend_pid)
            return True

        waiter = Waiter(db_url, CHANNEL, "t_peek", peek, pipelined=pipelined)
        _lingered(waiter)
        assert waiter.wait(30.0, _never, Pauses()) is True  # at once: no wait for the bound
        assert peeks == [waiter.pid] and waiter.registrations == 1 and waiter.waiting
        assert _registered(conn, waiter) == 1
        waiter.close()


def test_busy_leaves_the_registration_and_lingers_again(conn: Conn, db_url: str) -> None:
    waiter = Waiter(db_url, CHANNEL, "t_busy", lambda c: False)
    _lingered(waiter)
    assert waiter.wait(0.05, _never, Pauses()) is False
    assert _registered(conn, waiter) == 1
    waiter.busy()
    assert _registered(conn, waiter) == 0 and not waiter.waiting and waiter.lingered == 0
    assert waiter.conn is not None  # the session and its LISTEN stay
    _lingered(waiter)  # busy again means idle periods start with lingering again
    waiter.close()


def test_a_stop_request_ends_the_wait_without_counting_a_fallback(db_url: str) -> None:
    waiter = Waiter(db_url, CHANNEL, "t_stop", lambda c: False)
    _lingered(waiter)
    assert waiter.wait(30.0, lambda: True, Pauses()) is False
    assert waiter.fallbacks == 0 and waiter.registrations == 1
    waiter.close()


def test_a_waiter_without_a_server_says_false_and_keeps_no_connection() -> None:
    waiter = Waiter(DEAD, CHANNEL, "t_dead", lambda c: False)
    _lingered(waiter)
    assert waiter.wait(30.0, _never, Pauses()) is False
    assert waiter.conn is None and waiter.registrations == 0 and not waiter.waiting
