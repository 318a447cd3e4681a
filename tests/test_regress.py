"""The SQL probes with golden transcripts (scenarios.regress): every probe has its expected file
(the candidate matching each is a gate of the model-check notebook's smoke run), the transcript
masks what varies between clones, and a statement cut off by a timeout is not an answer (it
escapes, so the mutation sweep counts a RuntimeError, never a kill)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence_lib.mutation import history
from evidence_lib.pg.db import Server
from evidence_lib.scenarios import regress
from evidence_lib.scenarios.support.parts import candidate_databases


def test_every_probe_has_its_expected_file() -> None:
    names = regress.probes()
    assert names, "no SQL probes in tests/regress"
    assert [n for n in names if regress.expected(n) is None] == []
    assert sorted(p.stem for p in regress.EXPECTED_DIR.glob("*.out")) == names, "an expected file without a probe"


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
