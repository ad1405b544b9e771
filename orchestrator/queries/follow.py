"""Following a project's events: history from the database, then live messages from Redis,
with any gap filled from the database (pub/sub is at-most-once; DESIGN.md rule 5).

Redis going away does not end a follow: the database is polled until it is back.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

import redis
from sqlalchemy.exc import InterfaceError, OperationalError

from shared import events
from shared.db import session_scope
from shared.schemas import EventOut

log = logging.getLogger(__name__)
POLL_INTERVAL_S = 1.0


def _from_db(project_id: str, after_seq: int) -> list[EventOut]:
    """The next events, or none while the database is unreachable (a restart): keep following."""
    try:
        with session_scope() as session:
            return events.history(session, project_id, after_seq)
    except (OperationalError, InterfaceError):
        log.warning("database unreachable while following %s; retrying", project_id)
        time.sleep(POLL_INTERVAL_S)
        return []


class _Live:
    """A pub/sub subscription that reconnects, and reports a wake-up (or a timeout) per poll."""

    def __init__(self, redis_url: str, project_id: str) -> None:
        self._client = redis.Redis.from_url(redis_url)
        self._channel = events.channel(project_id)
        self._pubsub: redis.client.PubSub | None = None

    def wait(self, timeout_s: float) -> EventOut | None:
        try:
            if self._pubsub is None:
                self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
                self._pubsub.subscribe(self._channel)
            message = self._pubsub.get_message(timeout=timeout_s)
        except redis.RedisError:
            log.warning("lost Redis while following %s; polling the database", self._channel)
            self._drop()
            time.sleep(timeout_s)
            return None
        return events.decode(message["data"]) if message is not None else None

    def _drop(self) -> None:
        if self._pubsub is not None:
            with contextlib.suppress(redis.RedisError):
                self._pubsub.close()
            self._pubsub = None

    def close(self) -> None:
        self._drop()
        self._client.close()


def follow(
    redis_url: str, project_id: str, after_seq: int = 0, *, idle_timeout_s: float | None = None
) -> Iterator[EventOut]:
    """Every event of ``project_id`` after ``after_seq``, in order with no gap, live.

    Stops after a terminal event, or after ``idle_timeout_s`` with nothing new.
    """
    live = _Live(redis_url, project_id)
    # Subscribe before reading history so nothing published in between is missed.
    live.wait(0)
    last = after_seq
    idle_since = time.monotonic()
    try:
        while True:
            batch = _from_db(project_id, last)
            if not batch:
                message = live.wait(POLL_INTERVAL_S)
                if message is not None:
                    batch = [message] if message.seq == last + 1 else _from_db(project_id, last)
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
        live.close()
