"""Events: gapless per-project seq in Postgres, live on Redis (a follower gets an event from
pub/sub, not from its next read of the database), and a follower that misses a live message
still gets every event, in order, from the database.
"""

from __future__ import annotations

import queue
import threading
import time

import pytest
import redis

from orchestrator.queries.follow import follow
from shared import events
from shared.db import session_scope
from shared.event_payloads import (
    AgentOutputChunk,
    DeliveryPushed,
    ProjectCompleted,
    ProjectFailed,
    PromptUpdated,
    payload,
)
from shared.events import NullBus, RedisBus
from shared.models import Delivery, DeliveryKind, DeliveryStatus, Project, utcnow

pytestmark = pytest.mark.integration
_COMPLETED = ProjectCompleted(tasks=1)


def _say(text: str) -> AgentOutputChunk:
    return AgentOutputChunk(text=text)


def _said(event: events.EventOut) -> str:
    """What a chunk said, or the type of any other event."""
    data = payload(event)
    return data.text if isinstance(data, AgentOutputChunk) else event.type


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
            events.emit(NullBus(), project_id, PromptUpdated(chars=i))

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
    events.emit(bus, project_id, _say("one"))
    events.emit(NullBus(), project_id, _say("lost_on_the_wire"))  # written, never published
    events.emit(bus, project_id, _say("three"))
    events.emit(bus, project_id, _COMPLETED)
    consumer.join(timeout=20)
    assert not consumer.is_alive()
    assert [_said(e) for e in received] == ["one", "lost_on_the_wire", "three", "project_completed"]
    assert [e.seq for e in received] == [1, 2, 3, 4]


def test_follower_resumes_after_its_last_seq(project_id: str, redis_url: str) -> None:
    for written in (_say("a"), _say("b"), _say("c"), ProjectFailed(reason="r", task="t")):
        events.emit(NullBus(), project_id, written)
    resumed = list(follow(redis_url, project_id, after_seq=2, idle_timeout_s=5))
    assert [e.seq for e in resumed] == [3, 4]


def test_a_published_event_reaches_a_follower_live_without_waiting_for_a_poll(
    project_id: str, redis_url: str
) -> None:
    # Given a follower that has read the history and will not read the database again for an
    # hour unless pub/sub wakes it (the poll that fills gaps is what could hide a broken publish)
    poll_interval_s = 3600.0
    events.emit(NullBus(), project_id, _say("history"))
    received: queue.Queue[events.EventOut] = queue.Queue()

    def consume() -> None:
        for event in follow(redis_url, project_id, poll_interval_s=poll_interval_s):
            received.put(event)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    assert _said(received.get(timeout=30)) == "history"
    try:
        # When an event is recorded and published on Redis, as every part of the service does
        events.emit(RedisBus(redis_url), project_id, _say("live"))
        # Then it arrives long before the database is read again: only pub/sub can bring it
        try:
            arrived = received.get(timeout=poll_interval_s / 100)
        except queue.Empty:
            pytest.fail(f"no live event within {poll_interval_s / 100:.0f} s: is publishing on Redis broken?")
        assert (_said(arrived), arrived.seq) == ("live", 2)
    finally:
        # The follower ends either way: a terminal event, and a wake-up this test publishes itself
        end = events.emit(NullBus(), project_id, _COMPLETED)
        with redis.Redis.from_url(redis_url) as client:
            client.publish(events.channel(project_id), end.model_dump_json())
        consumer.join(timeout=30)
    assert not consumer.is_alive()


def test_a_follower_goes_on_past_the_end_until_the_delivery_it_decided_is_done(
    project_id: str, redis_url: str
) -> None:
    # Given a project whose end decided a delivery (the outbox row, written with the end)
    with session_scope() as session:
        delivery = Delivery(
            project_id=project_id,
            key="project",
            kind=DeliveryKind.PROJECT,
            remote="http://127.0.0.1:9/repo.git",
            branch=f"raas/{project_id}/project",
            created_at=utcnow(),
        )
        session.add(delivery)
        session.flush()
        delivery_id = delivery.id
    bus = RedisBus(redis_url)
    received: queue.Queue[events.EventOut] = queue.Queue()

    def consume() -> None:
        for event in follow(redis_url, project_id, poll_interval_s=0.2):
            received.put(event)

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    # When the project completes, then its branch is pushed
    events.emit(bus, project_id, _COMPLETED)
    assert received.get(timeout=30).type == events.PROJECT_COMPLETED
    events.emit(bus, project_id, DeliveryPushed(branch="b", sha="0" * 40, task=None))
    # Then the follower, still there after the end, sees the push
    assert received.get(timeout=30).type == events.DELIVERY_PUSHED
    # And it ends once the delivery is done
    with session_scope() as session:
        session.get_one(Delivery, delivery_id).status = DeliveryStatus.DELIVERED
    consumer.join(timeout=30)
    assert not consumer.is_alive()
    assert received.empty()
