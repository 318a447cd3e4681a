"""SQL probes with golden transcripts, as PostgreSQL's `pg_regress` runs them.

A probe is a committed SQL file, `tests/regress/<name>.sql`: statements run one by one in
autocommit as the superuser on a fresh clone of the migrated candidate; a line `-- session: N`
switches to session N (a connection of its own, opened on first use), so a probe can hold a
transaction open in one session while another calls the engine. Every statement is echoed, then
its rows or its SQLSTATE and first message line; uuids are numbered in order of appearance and
times masked, as the race transcripts are. The transcript must equal `tests/expected/regress/
<name>.out` (written by `python -m evidence_lib regress --accept`, reviewed by hand).

The probes were written while triaging the mutants that survived the whole sweep
(docs/mutation.md): each pins a behaviour no model history or race reached, such as which identifiers
an error names, a guard on a state only an operator reaches, or the order a definition's rows are
kept in. Each probe is a part of the model-check scenario of its own, so the mutation sweep runs
only the probes that execute a mutated function.

Waits are proven, never slept: a probe's own sessions run one statement at a time, and a wait on a
lock ends with the error 55P03 after `lock_timeout` (1 s), which the transcript shows; a statement
that must stay blocked while others go on is sent through dblink and `regress_settled(conn)` (the
prelude) returns once it finished or waits on a lock, observed with `pg_blocking_pids`. A statement
cut off by `statement_timeout` or a lost connection is not the engine's answer: it escapes as
`ProbeInterrupted`, which the sweep counts as a RuntimeError, never as a kill.
"""

from __future__ import annotations

import datetime
import difflib
import json
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pglast
import psycopg

from evidence_lib import PROJECT_ROOT
from evidence_lib.engine.flows import QueueMode
from evidence_lib.errors import EvidenceError
from evidence_lib.harness.isolation import TIME_RE, UUID_RE
from evidence_lib.pg.db import connect
from evidence_lib.results.scenario import ScenarioResult
from evidence_lib.scenarios.support.parts import Databases, PartSpec

PROBE_DIR = PROJECT_ROOT / "tests" / "regress"
EXPECTED_DIR = PROJECT_ROOT / "tests" / "expected" / "regress"
SESSION_RE = re.compile(r"^[ \t]*--\s*session:\s*(\d+)\s*$", re.M)
# not the engine's answer: the statement was cut off, or the connection went away
# (RG001: a liveness deadline of the prelude's waits ran out)
INTERRUPTED = ("57014", "57P01", "57P02", "57P03", "RG001")
SETTINGS = "set lock_timeout = '1s'; set statement_timeout = '20s'"
# Run silently before every probe (session 0): `regress_settled(conn)` waits until the statement a
# probe sent through dblink connection `conn` (a session that may block, which a probe's own
# sessions must not; connected with application_name regress_<conn>) has finished or waits on a
# lock, observed with pg_blocking_pids (an ordering proven, not slept) in this probe's own database
# (probes run side by side on clones of their own, and their connections share these names);
# `regress_terminated(pid)` ends a session and waits until it is gone. Each has a deadline (15 s):
# running out raises RG001, which ends the probe as ProbeInterrupted (a liveness failure, never a
# transcript line).
PRELUDE = """
create function public.regress_settled(conn text) returns text language plpgsql as $$
begin
  for i in 1..1500 loop
    if public.dblink_is_busy(conn) = 0 then
      return 'finished';
    end if;
    if exists (select from pg_catalog.pg_stat_activity a
                where a.datname = pg_catalog.current_database() and a.application_name = 'regress_' || conn
                  and pg_catalog.cardinality(pg_catalog.pg_blocking_pids(a.pid)) > 0) then
      return 'waiting on a lock';
    end if;
    perform pg_catalog.pg_sleep(0.01);  -- a poll under a deadline, not an ordering
    perform pg_catalog.pg_stat_clear_snapshot();  -- pg_stat_activity is read once per transaction
  end loop;
  raise exception using errcode = 'RG001', message = format('dblink %s neither finished nor waits after 15 s', conn);
end $$;
create function public.regress_terminated(pid integer) returns boolean language plpgsql as $$
begin
  if not pg_catalog.pg_terminate_backend(pid, 15000) then  -- waits until the backend is gone
    raise exception using errcode = 'RG001', message = format('backend %s still there after 15 s', pid);
  end if;
  return true;
end $$;
"""


class ProbeInterrupted(EvidenceError):
    """A probe statement was cut off by a timeout or lost its connection: no transcript."""


def probes(directory: Path = PROBE_DIR) -> list[str]:
    """The probe names, sorted."""
    return sorted(p.stem for p in directory.glob("*.sql"))


def statements(text: str) -> list[tuple[int, str]]:
    """(session, statement) pairs of a probe, in order (pglast splits each session's stretch)."""
    chunks = SESSION_RE.split(text)
    stretches = [(0, chunks[0])] + [(int(chunks[i]), chunks[i + 1]) for i in range(1, len(chunks), 2)]
    return [(session, st.strip()) for session, body in stretches for st in pglast.split(body)]


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, (dict, list)):
        return json.dumps(v, sort_keys=True, default=str)
    if isinstance(v, datetime.datetime):
        return v.isoformat(sep=" ")
    if isinstance(v, Decimal | float):
        return format(v, "g") if isinstance(v, float) else str(v)
    return str(v)


class _Masks:
    def __init__(self) -> None:
        self.ids: dict[str, str] = {}

    def __call__(self, text: str) -> str:
        text = UUID_RE.sub(lambda m: self.ids.setdefault(m.group(0), f"<id-{len(self.ids) + 1}>"), text)
        return TIME_RE.sub("<time>", text)


def transcript(url: str, text: str) -> str:
    """Run the probe `text` on the database at `url` and return its masked transcript."""
    mask, sessions, lines = _Masks(), dict[int, psycopg.Connection[Any]](), []
    try:
        for session, st in statements(text):
            if session not in sessions:
                sessions[session] = connect(url, application_name=f"regress_{session}", autocommit=True)
                sessions[session].execute(SETTINGS)
                if session == 0:
                    sessions[session].execute(PRELUDE)
            lines.append(f"[{session}] " + " ".join(st.split()))
            try:
                cur = sessions[session].execute(st.encode())
            except psycopg.Error as exc:
                if exc.sqlstate is None or exc.sqlstate in INTERRUPTED:  # no SQLSTATE: the connection is gone
                    raise ProbeInterrupted(f"statement {len(lines)} ({st[:80]}): {exc}") from exc
                lines.append(f"    ERROR {exc.sqlstate}: {str(exc).splitlines()[0]}")
                continue
            if cur.description is None:
                lines.append(f"    ({cur.rowcount} rows)" if cur.rowcount >= 0 else "    ok")
                continue
            lines.append("    " + " | ".join(c.name for c in cur.description))
            rows = cur.fetchall()
            lines += ["    " + " | ".join(_value(v) for v in row) for row in rows]
            lines.append(f"    ({len(rows)} rows)")
    finally:
        for conn in sessions.values():
            conn.close()
    return "\n".join(mask(line) for line in lines) + "\n"


def expected(name: str, directory: Path = EXPECTED_DIR) -> str | None:
    path = directory / f"{name}.out"
    return path.read_text() if path.exists() else None


def gate_name(name: str) -> str:
    return f"{name}_transcript_matches_expected"


def check(result: ScenarioResult, url: str, name: str) -> bool:
    """Run probe `name` on `url` and record whether its transcript equals the expected file."""
    got = transcript(url, (PROBE_DIR / f"{name}.sql").read_text())
    wanted = expected(name)
    if wanted == got:
        return result.gate(gate_name(name), True, f"{len(got.split(chr(10) + '['))} statements as expected")
    diff = (
        "no expected file"
        if wanted is None
        else "\n".join(
            difflib.unified_diff(wanted.splitlines(), got.splitlines(), f"{name}.out", "this run", lineterm="", n=1)
        )
    )
    return result.gate(gate_name(name), False, diff[:1500])


def _part(name: str) -> PartSpec:
    def part(result: ScenarioResult, databases: Databases, mode: QueueMode) -> None:
        with databases() as url:
            check(result, url, name)

    return PartSpec(f"regress_{name}", part, per_mode=False)


def parts() -> list[PartSpec]:
    """One part per probe (so the sweep runs only the probes that execute a mutated function)."""
    return [_part(name) for name in probes()]


def accept(database_url: str = "", directory: Path = EXPECTED_DIR,
           progress: Callable[[str], None] = print) -> list[Path]:  # fmt: skip
    """Run every probe on a fresh clone of the candidate and write its transcript as the expected
    file (review `git diff tests/expected/regress` before committing)."""
    from evidence_lib.scenarios.support.parts import candidate_databases
    from evidence_lib.scenarios.support.setup import scenario_server

    directory.mkdir(parents=True, exist_ok=True)
    written = []
    with scenario_server(database_url) as server, candidate_databases(server, prefix="regress") as databases:
        for name in probes():
            with databases() as url:
                text = transcript(url, (PROBE_DIR / f"{name}.sql").read_text())
            path = directory / f"{name}.out"
            path.write_text(text)
            written.append(path)
            progress(f"wrote {path.relative_to(PROJECT_ROOT)}")
    return written
