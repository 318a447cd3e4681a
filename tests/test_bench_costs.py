"""The benchmark's measuring instruments (issue 33, part 1): what a window cost the server, read
from the WAL and from wait-event sampling, and the ratios' intervals. Each instrument is shown
to see what it must see on a real server; a broken one reads zero and fails here."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from evidence_lib.bench import intervals
from evidence_lib.bench.costs import WaitSampler, WalWindow, WindowCosts
from evidence_lib.bench.targets import targets
from evidence_lib.pg.db import connect, one

DEADLINE = 5.0  # seconds for the blocked session to show in pg_locks (a liveness guard)


def test_the_wal_window_counts_commits_row_locks_and_updates(db_url: str) -> None:
    with connect(db_url) as conn:
        if int(one(conn, "show server_version_num")) < 150000:
            pytest.skip("pg_walinspect exists from PostgreSQL 15 (the WAL figures are a note there)")
        conn.execute("create table public.probe (id int primary key, v int, note text)")
        conn.execute("create index probe_by_v on public.probe (v)")
        conn.execute("insert into public.probe select g, 0, '' from generate_series(1, 10) g")
        wal = WalWindow(db_url)
        assert not wal.note, wal.note
        wal.start()
        for i in range(1, 6):  # five write transactions: a row lock, an indexed and a HOT update each
            with conn.transaction():
                conn.execute("select 1 from public.probe where id = %s for update", (i,))
                conn.execute("update public.probe set v = v + 1 where id = %s", (i,))
                conn.execute("update public.probe set note = 'x' where id = %s", (i + 5,))
        for _ in range(20):  # read-only transactions write no commit record
            conn.execute("select count(*) from public.probe")
        costs = WindowCosts()
        wal.stop(costs)
    assert not costs.note, costs.note
    figures = costs.per_unit(5)
    # other tests may share the server's WAL: at least what this test did, never less
    assert figures["commits_per_unit"] >= 1 and figures["row_locks_per_unit"] >= 1, figures
    assert costs.count(("Heap/HOT_UPDATE",)) >= 5 and costs.count(("Heap/UPDATE",)) >= 5, costs.records
    assert costs.wal_bytes and costs.wal_bytes > 5 * 100


def test_wait_sampling_sees_a_session_blocked_on_a_row_lock(db_url: str) -> None:
    with connect(db_url) as setup:
        setup.execute("create table public.probe (id int primary key)")
        setup.execute("insert into public.probe values (1)")
    holder, waiter = connect(db_url, autocommit=False), connect(db_url, application_name="probe_waiter")
    costs = WindowCosts()
    try:
        holder.execute("select 1 from public.probe where id = 1 for update")
        pid = one(waiter, "select pg_backend_pid()")
        blocked = threading.Thread(target=lambda: waiter.execute("select 1 from public.probe where id = 1 for update"))
        with WaitSampler(db_url, costs):
            blocked.start()
            with connect(db_url) as look:
                until = time.monotonic() + DEADLINE
                while not one(look, "select cardinality(pg_blocking_pids(%s)) > 0", (pid,)):
                    assert time.monotonic() < until, "the waiter never blocked"
                    time.sleep(0.01)  # a liveness poll; the order is proven by pg_blocking_pids
            seen = time.monotonic() + DEADLINE
            while not costs.lock_waits and time.monotonic() < seen:
                time.sleep(0.01)  # the sampler looks every SAMPLE_EVERY s
        holder.rollback()
        blocked.join(DEADLINE)
    finally:
        holder.close()
        waiter.close()
    assert costs.lock_waits and set(costs.lock_waits) <= {"transactionid", "tuple"}, costs.lock_waits
    assert costs.per_unit(1)["lock_wait_share"] > 0


def test_a_paired_ratio_has_a_student_t_interval() -> None:
    exact = intervals.paired_ratio([(200.0, 100.0), (300.0, 150.0), (100.0, 50.0)])
    assert exact is not None and exact.ratio == pytest.approx(2.0) and exact.precise
    assert exact.low == pytest.approx(2.0) and exact.high == pytest.approx(2.0)
    noisy = intervals.paired_ratio([(100.0, 100.0), (130.0, 100.0), (80.0, 100.0)])
    assert noisy is not None and noisy.low < noisy.ratio < noisy.high and not noisy.precise
    assert noisy.half_width > intervals.PRECISION and "[" in noisy.shown()
    alone = intervals.paired_ratio([(1.0, 2.0)])
    assert alone is not None and not alone.precise and "one pair" in alone.shown()
    assert intervals.paired_ratio([(0.0, 1.0)]) is None


def _sample(system: str, rep: int, rate: float) -> dict[str, Any]:
    return {"system": system, "workers": 2, "repetition": rep, "units_per_s": rate}


def test_pool_ratios_pair_the_systems_of_one_repetition_and_targets_read_them() -> None:
    samples = [_sample("v2", 0, 100), _sample("v1", 0, 200), _sample("v2", 1, 60), _sample("v1", 1, 120),
               _sample("anchor", 0, 50), _sample("raw", 0, 400)]  # fmt: skip
    found = {r["ratio"]: r for r in intervals.pool_ratios(samples)}
    assert found["v2 / v1"]["value"] == pytest.approx(0.5) and found["v2 / v1"]["pairs"] == 2
    assert found["v2 / anchor"]["pairs"] == 1 and found["v2 / raw bound"]["value"] == pytest.approx(0.5)
    pools = [{"system": s, "workers": 2, "units_per_s": 1.0} for s in ("v2", "v1", "anchor", "raw")]
    rows = {t["target"]: t for t in targets(pools, list(found.values()), [], [], {}).rows}
    assert rows["worker pools at 2: v2 / v1 pool >= 0.8"]["met"] is False
    assert rows["worker pools at 2: v2 / anchor pool >= 1.2"]["met"] is True
    assert rows["a lone run: v2 A -> B p50 <= 10 ms"]["measured"] == "not measured"
