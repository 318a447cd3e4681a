"""What every scenario does first: its server, a fresh migrated database, the queue modes it
proves, and timing its phases."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from psycopg import sql

from evidence_lib.engine.flows import QueueMode
from evidence_lib.errors import EvidenceError
from evidence_lib.pg import db, migrate, servers
from evidence_lib.pg.db import Server, connect


@contextlib.contextmanager
def scenario_server(database_url: str = "") -> Iterator[Server]:
    """The server a scenario runs on: `database_url`, else `DATABASE_URL`, else a throwaway one."""
    with servers.open_server(database_url or None) as server:
        yield server


@contextlib.contextmanager
def scenario_database(server: Server, *, hooks: str = "", prefix: str = "ev") -> Iterator[str]:
    """A fresh scratch database with the candidate migrations applied. `hooks` arms test hooks
    for every session of that database (only used to prove that a gate can turn red)."""
    with db.scratch_database(server, prefix=prefix) as url:
        migrate.apply_migrations(url)
        if hooks:
            with connect(url) as conn:
                conn.execute(
                    sql.SQL("alter database {} set engine.hooks = {}").format(
                        sql.Identifier(db.database_name(url)), sql.Literal(hooks)
                    )
                )
        yield url


def modes(queue_modes: str) -> list[QueueMode]:
    """Parse the notebooks' `queue_modes` parameter ("flow,step")."""
    out: list[QueueMode] = []
    for part in queue_modes.split(","):
        name = part.strip()
        if name not in ("flow", "step"):
            raise EvidenceError(f"unknown queue mode {name!r}: use flow, step or flow,step")
        out.append(name)  # type: ignore[arg-type]
    return out


@contextlib.contextmanager
def timed(result: Any, phase: str, **labels: Any) -> Iterator[None]:
    """Record the wall time of a phase in a ScenarioResult."""
    start = time.perf_counter()
    try:
        yield
    finally:
        result.timing(phase, time.perf_counter() - start, **labels)
