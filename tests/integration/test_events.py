"""Events: gapless per-project seq in Postgres, live on Redis, and a follower that misses a
live message still gets every event, in order, from the database.
"""

from __future__ import annotations

import threading
import time

import pytest

from orchestrator.queries.follow import follow
from shared import events
from shared.db import session_scope
from shared.events import NullBus, RedisBus
from shared.models import Project, utcnow

pytestmark = pytest.mark.integration


@pytest.fixture
def project_id(database_url: str) -> str:
    with session_scope() as session:
        project = Project(name="events", prompt="p", config={}, created_at=utcnow())
        session.add(project)
        session.flush()
        return project.id


def test_seq_is_gapless_under_concurrent_writers(project_id: str) -> None:
    def write(n: int) -> None:
        for i in range(n):
            events.emit(NullBus(), project_id, "tick", {"i": i})

    threads = [threading.Thread(target=write, args=(10,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with session_scope() as session:
        seqs = [e.seq for e in events.history(session, project_id)]
    assert seqs == list(range(1, 41))


def test_follower_fills_a_missed_live_message_from_the_database(project_id: str, redis_url: str) -> None:
    bus = RedisBus(redis_url)
    received: list[events.EventOut] = []

    def consume() -> None:
        received.extend(follow(redis_url, project_id, idle_timeout_s=10))

    consumer = threading.Thread(target=consume)
    consumer.start()
    time.sleep(0.3)
    events.emit(bus, project_id, "one")
    events.emit(NullBus(), project_id, "lost_on_the_wire")  # written, never published
    events.emit(bus, project_id, "three")
    events.emit(bus, project_id, events.PROJECT_COMPLETED)
    consumer.join(timeout=20)
    assert not consumer.is_alive()
    assert [e.type for e in received] == ["one", "lost_on_the_wire", "three", "project_completed"]
    assert [e.seq for e in received] == [1, 2, 3, 4]


def test_follower_resumes_after_its_last_seq(project_id: str, redis_url: str) -> None:
    for name in ("a", "b", "c", events.PROJECT_FAILED):
        events.emit(NullBus(), project_id, name)
    resumed = list(follow(redis_url, project_id, after_seq=2, idle_timeout_s=5))
    assert [e.seq for e in resumed] == [3, 4]
