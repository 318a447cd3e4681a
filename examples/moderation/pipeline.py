"""The moderation flow: fetch (slow) -> classify (fast) -> verdict (fast), typed by its steps.

The same definition is deployed as a plain flow (one queue) or with private step queues
(`with_step_queues`), each step with its own worker pool. Handlers talk to the application's
own tables through their own connection; no handler touches PGMQ.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Literal

from evidence_lib.engine.flows import Flow, StepQueuedFlow, with_step_queues
from evidence_lib.engine.jsontypes import Json
from evidence_lib.pg.db import connect
from examples.moderation import domain

Steps = Literal["fetch", "classify", "verdict"]
FLAGGED = {"buy": 0.3, "cheap": 0.3, "free": 0.2, "spam": 0.5, "offer": 0.3, "idiot": 0.6, "hate": 0.6}


class TransientFetchError(Exception):
    """The forum API timed out; the engine retries the step with backoff."""


@dataclass
class Behaviour:
    """Knobs for validation runs: how slow the remote fetch is, which fetches fail once."""

    fetch_seconds: float = 0.05
    flaky_threads: set[int] = field(default_factory=set)
    hang_threads: set[int] = field(default_factory=set)
    released: threading.Event = field(default_factory=threading.Event)


def build(url: str, behaviour: Behaviour | None = None, *, slug: str = "moderation") -> Flow[Steps]:
    b = behaviour or Behaviour()

    def fetch(payload: Json) -> Json:
        assert isinstance(payload, dict)
        review_id, thread_id = int(payload["review_id"]), int(payload["thread_id"])  # type: ignore[arg-type]
        with connect(url, application_name="moderation_handler") as conn:
            domain.record_fetch_attempt(conn, review_id)
            attempts = conn.execute(
                "select fetch_attempts from moderation.reviews where review_id = %s", (review_id,)
            ).fetchone()
            if thread_id in b.hang_threads:
                b.released.wait(60)  # the remote call hangs; the worker is killed meanwhile
            time.sleep(b.fetch_seconds)  # the remote forum API
            if thread_id in b.flaky_threads and attempts is not None and attempts[0] == 1:
                raise TransientFetchError(f"forum API timed out for thread {thread_id}")
            content = domain.thread(conn, thread_id)
            domain.mark_fetched(conn, review_id)
        return {"review_id": review_id, **content}

    def classify(payload: Json) -> Json:
        assert isinstance(payload, dict) and isinstance(payload["fetch"], dict)
        fetched = payload["fetch"]
        words = str(fetched["body"]).split()
        score = round(min(1.0, sum(FLAGGED.get(w, 0.0) for w in words) / 3), 3)
        label = "toxic" if any(w in ("idiot", "hate") for w in words) else "spam" if score > 0.4 else "ok"
        with connect(url, application_name="moderation_handler") as conn:
            domain.mark_classified(conn, int(fetched["review_id"]), label, score)  # type: ignore[arg-type]
        return {"review_id": fetched["review_id"], "label": label, "score": score}

    def verdict(payload: Json) -> Json:
        assert isinstance(payload, dict) and isinstance(payload["classify"], dict)
        c = payload["classify"]
        decision = {"toxic": "remove", "spam": "hold"}.get(str(c["label"]), "publish")
        with connect(url, application_name="moderation_handler") as conn:
            domain.decide(conn, int(c["review_id"]), decision)  # type: ignore[arg-type]
        return {"verdict": decision}

    flow: Flow[Steps] = Flow(slug, max_attempts=3, base_delay=0, timeout=30)
    flow.add("fetch", fetch, timeout=2)
    flow.add("classify", classify, deps=["fetch"])
    flow.add("verdict", verdict, deps=["classify"])
    return flow


def staged(url: str, behaviour: Behaviour | None = None, *, slug: str = "moderation_staged") -> StepQueuedFlow[Steps]:
    return with_step_queues(build(url, behaviour, slug=slug))
