"""The SQL probes with golden transcripts (scenarios.regress): every probe has its expected file
(the candidate matching each is a gate of the model-check notebook's smoke run), the transcript
masks what varies between clones, and a statement cut off by a timeout is not an answer (it
escapes, so the mutation sweep counts a RuntimeError, never a kill)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from evidence_lib.mutation import history
from evidence_lib.pg.db import Server, connect
from evidence_lib.scenarios import regress
from evidence_lib.scenarios.support.parts import candidate_databases


def test_every_probe_has_its_expected_file() -> None:
    names = regress.probes()
    assert names, "no SQL probes in tests/regress"
    assert [n for n in names if regress.expected(n) is None] == []
    assert sorted(p.stem for p in regress.EXPECTED_DIR.glob("*.out")) == names, "an expected file without a probe"


def test_no_probe_prints_a_query_plan() -> None:
    """A plan's text differs between majors (PostgreSQL 18 prints `(InitPlan 1).col1` where 15 prints
    `$0`), and CI compares every transcript on both: a probe pins what the engine did, never how the
    planner said it would."""
    explaining = [
        name
        for name in regress.probes()
        for _, sql in regress.statements((regress.PROBE_DIR / f"{name}.sql").read_text())
        if sql.lstrip().lower().startswith("explain")
    ]
    assert explaining == []


def test_a_probe_sleeps_only_to_let_a_timer_expire_and_says_so() -> None:
    """A sleep may let a visibility time, a start delay or a stall line pass (one-sided: a longer
    wait under load gives the same transcript); it never decides which session goes first, which
    is proven in pg_locks (regress_settled). Each sleep says which timer it waits out on the
    comment line above it."""
    unexplained = []
    for name in regress.probes():
        lines = (regress.PROBE_DIR / f"{name}.sql").read_text().splitlines()
        for i, line in enumerate(lines):
            if "pg_sleep" not in line:
                continue
            start = i
            while start > 0 and lines[start - 1].startswith("--"):  # the comment block right above
                start -= 1
            if not any(c.startswith("-- a timer expires, nothing is ordered") for c in lines[start:i]):
                unexplained.append(f"{name}:{i + 1}: {line.strip()}")
    assert unexplained == []


def test_a_transcript_numbers_ids_masks_times_and_shows_errors(server: Server) -> None:
    probe = """
    select '11111111-2222-3333-4444-555555555555'::uuid as a, now() as t, '{"b": 1, "a": [2]}'::jsonb as j;
    -- session: 1
    select '11111111-2222-3333-4444-555555555555'::uuid as a, gen_random_uuid() is not null as fresh;
    select engine.v2_start_run('no_such_flow', '{}');
    """
    with candidate_databases(server, prefix="rg") as databases, databases() as url:
        text = regress.transcript(url, probe)
    assert '<id-1> | <time> | {"a": [2], "b": 1}' in text
    assert "[1] select '<id-1>'::uuid as a" in text and "<id-1> | True" in text
    assert "ERROR DR" in text and "no_such_flow" in text


def test_a_wait_is_observed_in_the_probes_own_database_only(server: Server) -> None:
    """Probes run side by side, each on its own clone, and their dblink connections share names:
    another clone's `regress_c` waiting on a lock must not make this probe's `regress_settled('c')`
    answer before its own statement is done."""
    dblink = (
        "select dblink_connect('c', format('dbname=%s port=%s host=%s user=%s', current_database(), "
        "current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1), "
        "current_user) || ' application_name=regress_c');"
    )
    probe = f"""
    create extension if not exists dblink;
    {dblink}
    select dblink_send_query('c', 'select pg_sleep(0.3)');
    select regress_settled('c');
    """
    with (
        candidate_databases(server, prefix="rg") as databases,
        databases() as other,
        databases() as url,
        connect(other) as holder,
        connect(other, application_name="regress_c") as waiter,
        connect(other) as watcher,  # autocommit: a fresh pg_stat_activity each statement
    ):
        holder.execute("begin; lock table engine.runs")
        waiter.execute("set lock_timeout = '10s'")
        blocked = threading.Thread(target=lambda: waiter.execute("begin; lock table engine.runs"), daemon=True)
        blocked.start()
        deadline = time.monotonic() + 10
        while not watcher.execute(
            "select exists (select from pg_stat_activity where datname = current_database()"
            " and application_name = 'regress_c' and cardinality(pg_blocking_pids(pid)) > 0)"
        ).fetchone()[0]:  # type: ignore[index]
            assert time.monotonic() < deadline, "the other clone's regress_c never waited on the lock"
            time.sleep(0.01)  # a poll under a deadline
        text = regress.transcript(url, probe)
        holder.execute("rollback")
        blocked.join(10)
    assert text.splitlines()[-2:] == ["    finished", "    (1 rows)"], text


@pytest.mark.parametrize(
    ("probe", "said"),
    [
        ("set statement_timeout = '20ms'; select pg_sleep(1);", "pg_sleep"),
        # the prelude's waits raise RG001 when their liveness deadline runs out
        ("do $$ begin raise exception using errcode = 'RG001', message = 'still waiting'; end $$;", "still waiting"),
    ],
)
def test_a_statement_cut_off_by_a_timeout_is_not_an_answer(server: Server, probe: str, said: str) -> None:
    with (
        candidate_databases(server, prefix="rg") as databases,
        databases() as url,
        pytest.raises(regress.ProbeInterrupted, match=said),
    ):
        regress.transcript(url, probe)


def test_a_changed_probe_or_expected_file_invalidates_reused_part_verdicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert {"tests/regress", "tests/expected"} <= set(history.PARTS_CODE)
    monkeypatch.setattr(history, "PROJECT_ROOT", tmp_path)
    (tmp_path / "tests" / "regress").mkdir(parents=True)
    probe = tmp_path / "tests" / "regress" / "p.sql"
    prints = []
    for text in ("select 1;", "select 2;"):
        probe.write_text(text)
        history.fingerprint.cache_clear()
        prints.append(history.fingerprint(("tests/regress",)))
    history.fingerprint.cache_clear()
    assert prints[0] != prints[1]
