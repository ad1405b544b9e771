"""Following a project's events: history from the database, then live messages from Redis,
with any gap filled from the database (pub/sub is at-most-once; DESIGN.md rule 5).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import redis

from shared import events
from shared.db import session_scope
from shared.schemas import EventOut

POLL_INTERVAL_S = 1.0


def _from_db(project_id: str, after_seq: int) -> list[EventOut]:
    with session_scope() as session:
        return events.history(session, project_id, after_seq)


def follow(
    redis_url: str, project_id: str, after_seq: int = 0, *, idle_timeout_s: float | None = None
) -> Iterator[EventOut]:
    """Every event of ``project_id`` after ``after_seq``, in order with no gap, live.

    Stops after a terminal event, or after ``idle_timeout_s`` with nothing new.
    """
    client = redis.Redis.from_url(redis_url)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    # Subscribe before reading history so nothing published in between is missed.
    pubsub.subscribe(events.channel(project_id))
    last = after_seq
    idle_since = time.monotonic()
    try:
        while True:
            batch = _from_db(project_id, last)
            message = None
            if not batch:
                message = pubsub.get_message(timeout=POLL_INTERVAL_S)
                if message is not None:
                    live = events.decode(message["data"])
                    batch = [live] if live.seq == last + 1 else _from_db(project_id, last)
            for event in batch:
                if event.seq != last + 1:
                    break
                last = event.seq
                idle_since = time.monotonic()
                yield event
                if event.type in events.TERMINAL_EVENTS:
                    return
            if idle_timeout_s is not None and time.monotonic() - idle_since > idle_timeout_s:
                return
    finally:
        pubsub.close()
        client.close()
