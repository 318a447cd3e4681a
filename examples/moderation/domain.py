"""The application's own state: threads, reviews and their guarded transitions."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any
from uuid import UUID

from evidence_lib.engine import v1
from evidence_lib.pg.db import Conn

SCHEMA = Path(__file__).with_name("schema.sql")
WORDS = [
    "great",
    "thanks",
    "buy",
    "cheap",
    "free",
    "idiot",
    "help",
    "question",
    "spam",
    "offer",
    "hate",
    "nice",
]
WEIGHTS = [8, 8, 2, 2, 2, 0.3, 8, 8, 1, 2, 0.3, 8]


def install(conn: Conn) -> None:
    if conn.execute("select to_regnamespace('moderation')").fetchone() == (None,):
        conn.execute(SCHEMA.read_text().encode())


def seed_threads(conn: Conn, count: int, *, seed: int = 7) -> list[int]:
    rng = random.Random(seed)
    ids = []
    with conn.transaction():
        for i in range(1, count + 1):
            body = " ".join(rng.choices(WORDS, weights=WEIGHTS, k=12))
            conn.execute(
                "insert into moderation.threads values (%s, %s, %s, %s, %s) on conflict do nothing",
                (i, rng.choice(["python", "postgres", "offtopic"]), f"thread {i}", body, f"user{i % 17}"),
            )
            ids.append(i)
    return ids


def submit_review(conn: Conn, flow_slug: str, thread_id: int) -> tuple[int, UUID]:
    """The domain claim and the engine run are created in one transaction."""
    with conn.transaction():
        row = conn.execute(
            "insert into moderation.reviews (thread_id) values (%s) returning review_id", (thread_id,)
        ).fetchone()
        assert row is not None
        review_id = int(row[0])
        run_id = v1.start_flow(conn, flow_slug, {"review_id": review_id, "thread_id": thread_id})
        conn.execute("update moderation.reviews set run_id = %s where review_id = %s", (run_id, review_id))
    return review_id, run_id


def record_fetch_attempt(conn: Conn, review_id: int) -> None:
    conn.execute("update moderation.reviews set fetch_attempts = fetch_attempts + 1 where review_id = %s", (review_id,))


def mark_fetched(conn: Conn, review_id: int) -> bool:
    cur = conn.execute(
        "update moderation.reviews set status = 'fetched', fetched_at = clock_timestamp() "
        "where review_id = %s and status = 'submitted'",
        (review_id,),
    )
    return cur.rowcount == 1


def mark_classified(conn: Conn, review_id: int, label: str, score: float) -> bool:
    cur = conn.execute(
        "update moderation.reviews set status = 'classified', label = %s, score = %s, "
        "classified_at = clock_timestamp() where review_id = %s and status = 'fetched'",
        (label, score, review_id),
    )
    return cur.rowcount == 1


def decide(conn: Conn, review_id: int, verdict: str) -> bool:
    cur = conn.execute(
        "update moderation.reviews set status = 'decided', verdict = %s, "
        "decided_at = clock_timestamp() where review_id = %s and status = 'classified'",
        (verdict, review_id),
    )
    return cur.rowcount == 1


def thread(conn: Conn, thread_id: int) -> dict[str, Any]:
    row = conn.execute(
        "select forum, title, body, author from moderation.threads where thread_id = %s", (thread_id,)
    ).fetchone()
    if row is None:
        raise LookupError(f"thread {thread_id} does not exist")
    return {"forum": row[0], "title": row[1], "body": row[2], "author": row[3]}


def summary(conn: Conn) -> dict[str, Any]:
    rows = conn.execute(
        "select status, verdict, count(*) from moderation.reviews group by 1, 2 order by 1, 2"
    ).fetchall()
    return {f"{s}/{v or '-'}": n for s, v, n in rows}
