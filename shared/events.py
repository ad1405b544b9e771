"""Events: every one is written to the database with a gapless per-project ``seq``, then
published on the bus for live followers (DESIGN.md rule 5).

Publishing happens only after the row is committed, so a follower that sees a live message
can always find it (and anything before it) in the database.
"""

from __future__ import annotations

import json
import logging
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.orm import Session

from shared import notifications
from shared.db import session_scope, survives_restarts
from shared.models import Event, Project, utcnow
from shared.schemas import EventOut

log = logging.getLogger(__name__)

# Event types, spelled as in DESIGN.md and the issues.
PROJECT_CREATED = "project_created"
PROJECT_STARTED = "project_started"
PROJECT_PAUSED = "project_paused"
PROJECT_RESUMED = "project_resumed"
PROJECT_STOPPED = "project_stopped"
PROJECT_COMPLETED = "project_completed"
PROJECT_FAILED = "project_failed"
ITERATION_STARTED = "iteration_started"
ITERATION_COMPLETE = "iteration_complete"
ITERATION_ERROR = "iteration_error"
AGENT_OUTPUT_CHUNK = "agent_output_chunk"
AGENT_TOOL_CALL = "agent_tool_call"
TOOL_EXECUTED = "tool_executed"
LLM_RETRY = "llm_retry"
BUDGET_WARNING = "budget_warning"
BUDGET_EXCEEDED = "budget_exceeded"
API_KEY_REQUIRED = "api_key_required"
PROMPT_UPDATED = "prompt_updated"
BUDGET_CHANGED = "budget_changed"
CIRCUIT_BREAKER_TRIGGERED = "circuit_breaker_triggered"
SUBAGENT_SPAWNED = "subagent_spawned"
TASK_VALIDATED = "task_validated"
RATE_LIMIT_WAIT = "rate_limit_wait"
# No live worker consumes the iterations queue while the project's iterations wait; and the end of it.
NO_WORKERS = "no_workers"
WORKERS_BACK = "workers_back"
# An agent wrote a key of the memory bank; an agent sent a message to other agents.
MEMORY_WRITTEN = "memory_written"
MESSAGE_SENT = "message_sent"
# The work back on the user's remote (orchestrator.delivery): a branch pushed, the pull request
# opened or updated, or a delivery that failed and why.
DELIVERY_PUSHED = "delivery_pushed"
PULL_REQUEST_OPENED = "pull_request_opened"
PULL_REQUEST_UPDATED = "pull_request_updated"
DELIVERY_FAILED = "delivery_failed"
# The team loop (DESIGN.md rule 13): a person spoke to an agent; an approval waits, and was
# decided; the project is delivered and follows its pull request; a round of CI or review
# feedback started and finished; the follow ended (merged, closed, a cap).
PERSON_SAID = "person_said"
APPROVAL_WAITING = "approval_waiting"
APPROVAL_DECIDED = "approval_decided"
PROJECT_DELIVERED = "project_delivered"
ROUND_STARTED = "round_started"
ROUND_FINISHED = "round_finished"
FOLLOW_ENDED = "follow_ended"

# A trigger refused a run its limits do not allow (issue #24): recorded on the refused run's
# project, which is never started.
TRIGGER_REFUSED = "trigger_refused"

#: A follower stops after one of these.
TERMINAL_EVENTS = frozenset({PROJECT_COMPLETED, PROJECT_FAILED, PROJECT_STOPPED, PROJECT_DELIVERED})


class EventData(BaseModel):
    """What one type of event says; the models, one per type, are in shared.event_payloads."""

    model_config = ConfigDict(frozen=True)

    TYPE: ClassVar[str]
    #: Whether people may subscribe to this type: each one recorded then becomes a notification
    #: per matching subscription, in the same transaction (shared.notifications).
    NOTIFY: ClassVar[bool] = False

    def data(self) -> dict[str, Any]:
        """The payload as stored and sent: JSON, without the fields its writer left out."""
        return self.model_dump(mode="json", exclude_unset=True)


def channel(project_id: str) -> str:
    return f"raas:events:{project_id}"


class EventBus(Protocol):
    def publish(self, event: EventOut) -> None: ...


class RedisBus:
    """Publishes events on Redis pub/sub, one channel per project."""

    def __init__(self, redis_url: str) -> None:
        import redis

        self._redis = redis.Redis.from_url(redis_url)

    def publish(self, event: EventOut) -> None:
        try:
            self._redis.publish(channel(event.project_id), event.model_dump_json())
        except Exception:
            # The row is already committed: a follower fills the gap from the database.
            log.warning("could not publish event %s/%s", event.project_id, event.seq, exc_info=True)


class NullBus:
    def publish(self, event: EventOut) -> None:
        return None


# Built once: on a hand-off's path, building a statement costs about as much as running it.
_NEXT_SEQ = (
    update(Project)
    .where(Project.id == bindparam("project_id"))
    .values(last_event_seq=Project.last_event_seq + 1)
    .returning(Project.last_event_seq)
    .execution_options(synchronize_session=False)
)
# A plain INSERT, not an ORM object flushed by the unit of work: every event of every iteration
# passes here, and the row is never read back in the same session.
_INSERT = insert(Event)


def record(
    session: Session,
    project_id: str,
    payload: EventData,
    *,
    agent_id: str | None = None,
    iteration_id: str | None = None,
) -> EventOut:
    """Write one event (of the payload's type) in ``session``'s transaction; publish it after
    the commit."""
    seq = session.execute(_NEXT_SEQ, {"project_id": project_id}).scalar_one()
    event = EventOut(
        project_id=project_id,
        seq=seq,
        type=payload.TYPE,
        data=payload.data(),
        agent_id=agent_id,
        iteration_id=iteration_id,
        ts=utcnow(),
    )
    session.connection().execute(_INSERT, event.model_dump())
    if payload.NOTIFY:
        notifications.fan_out(session, event)
    return event


@survives_restarts
def emit(
    bus: EventBus,
    project_id: str,
    payload: EventData,
    *,
    agent_id: str | None = None,
    iteration_id: str | None = None,
) -> EventOut:
    """Record one event in its own transaction and publish it."""
    with session_scope() as session:
        event = record(session, project_id, payload, agent_id=agent_id, iteration_id=iteration_id)
    bus.publish(event)
    return event


def history(session: Session, project_id: str, after_seq: int = 0, limit: int = 1000) -> list[EventOut]:
    rows = session.scalars(
        select(Event)
        .where(Event.project_id == project_id, Event.seq > after_seq)
        .order_by(Event.seq)
        .limit(limit)
    )
    return [EventOut.model_validate(row) for row in rows]


def decode(raw: bytes | str) -> EventOut:
    return EventOut.model_validate(json.loads(raw))
