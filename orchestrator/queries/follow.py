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
from sqlalchemy import select
from sqlalchemy.exc import InterfaceError, OperationalError

from shared import events
from shared.db import session_scope
from shared.models import Delivery, DeliveryStatus, Event
from shared.schemas import EventOut

log = logging.getLogger(__name__)
POLL_INTERVAL_S = 1.0
PAGE = 1000  # events read from the database at a time
# How long a follow waits after the end for the deliveries it decided: a push and a pull request
# take seconds; one still pending later is being retried (the reconcile loop) and `raas status`
# shows it, while a follower that never ended would hang the script that runs it.
DELIVERY_WAIT_S = 300.0


# A delivered project runs again for each pull request round, which ends with round_finished.
_ENDS = events.TERMINAL_EVENTS | {events.ROUND_FINISHED}


def _goes_on(project_id: str, end_seq: int) -> bool:
    """Whether the project has more to say after the end at ``end_seq``: a pull request round
    started after it, or a delivery its end decided is still pending (its branch, its pull
    request and the project's ``project_delivered`` come after ``project_completed``). An
    unreachable database says no: the stream ends there."""
    round_started = select(Event.seq).where(
        Event.project_id == project_id, Event.seq > end_seq, Event.type == events.ROUND_STARTED
    )
    delivering = select(Delivery.id).where(
        Delivery.project_id == project_id, Delivery.status == DeliveryStatus.PENDING
    )
    try:
        with session_scope() as session:
            return any(
                session.scalars(query.limit(1)).first() is not None for query in (round_started, delivering)
            )
    except (OperationalError, InterfaceError):
        return False


def _from_db(project_id: str, after_seq: int) -> list[EventOut]:
    """The next events, or none while the database is unreachable (a restart): keep following."""
    try:
        with session_scope() as session:
            return events.history(session, project_id, after_seq, limit=PAGE)
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
    redis_url: str,
    project_id: str,
    after_seq: int = 0,
    *,
    idle_timeout_s: float | None = None,
    poll_interval_s: float = POLL_INTERVAL_S,
) -> Iterator[EventOut]:
    """Every event of ``project_id`` after ``after_seq``, in order with no gap, live.

    The history is read once; after it, events come from pub/sub, and the database is read again
    only when a live message shows a gap (or repeats one) or ``poll_interval_s`` passes without
    one: a message pub/sub dropped is found within one interval.

    Stops after a terminal event and the deliveries it decided, or after ``idle_timeout_s`` with
    nothing new.
    """
    live = _Live(redis_url, project_id)
    # Subscribe before reading history so nothing published in between is missed.
    live.wait(0)
    last = after_seq
    idle_since = time.monotonic()
    ended: int | None = None  # the seq of the last end, while what comes after it is awaited
    ended_at = 0.0
    try:
        batch = _from_db(project_id, last)
        while True:
            for event in batch:
                if event.seq != last + 1:
                    break
                last = event.seq
                idle_since = time.monotonic()
                yield event
                if event.type in _ENDS:
                    ended, ended_at = last, event.ts.timestamp()  # a past end waits no more
                elif event.type == events.ROUND_STARTED:
                    ended = None
            if ended is not None and (
                time.time() - ended_at > DELIVERY_WAIT_S or not _goes_on(project_id, ended)
            ):
                return
            wait_s = poll_interval_s
            if idle_timeout_s is not None:
                idle_left_s = idle_timeout_s - (time.monotonic() - idle_since)
                if idle_left_s < 0:
                    return
                wait_s = min(wait_s, idle_left_s)
            if len(batch) >= PAGE:
                batch = _from_db(project_id, last)  # a full page: there may be more
                continue
            message = live.wait(wait_s)
            if message is not None and message.seq == last + 1:
                batch = [message]
            else:  # a gap, a repeat, or nothing for a while: the database has every event
                batch = _from_db(project_id, last)
    finally:
        live.close()
