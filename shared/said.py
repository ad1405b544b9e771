"""What a person says to a running agent (``raas say``): written once, read once.

``say`` writes the message and its ``person_said`` event in the caller's transaction. The agent
it is for takes it at its next turn boundary (:func:`take`, one conditional UPDATE per message,
so two turn boundaries racing never both read it): the claim of its next iteration (the first
message, for every harness) or, in the built-in loop, before its next model call. What a person
says is shown as theirs and kept in the transcript; the agent reads it as a person's words,
quoted, never as the project's settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import or_, select, update
from sqlalchemy.orm import Session

from shared import events
from shared.errors import Conflict, InvalidInput, NotFound
from shared.event_payloads import PersonSaid
from shared.models import Agent, PersonMessage, Project, utcnow
from shared.schemas import EventOut

SAID_CHARS = 8000


@dataclass(frozen=True)
class Heard:
    """A person's message as the agent reads it."""

    id: str
    author: str
    text: str
    now: bool


def say(
    session: Session,
    project: Project,
    text: str,
    *,
    author: str,
    agent_id: str | None = None,
    now: bool = False,
) -> tuple[PersonMessage, EventOut]:
    """Leave ``text`` for the project's agent (``agent_id``: that one; None: the first to reach a
    turn boundary). Call with the project row locked.

    Raises:
        InvalidInput: the text is blank, too long or holds a NUL.
        NotFound: no such agent in the project.
        Conflict: the project has ended; no agent will read it. Nothing is written.
    """
    if not text.strip() or len(text) > SAID_CHARS or "\x00" in text:
        msg = f"say: give 1 to {SAID_CHARS} characters of plain text"
        raise InvalidInput(msg)
    if project.status.is_terminal:
        msg = f"project {project.id} has ended ({project.status.value}); no agent will read what you say"
        raise Conflict(msg)
    if agent_id is not None:
        agent = session.get(Agent, agent_id)
        if agent is None or agent.project_id != project.id:
            msg = f"project {project.id} has no agent {agent_id}; see `raas agents {project.id}`"
            raise NotFound(msg)
    message = PersonMessage(
        project_id=project.id, agent_id=agent_id, author=author, text=text, now=now, created_at=utcnow()
    )
    session.add(message)
    session.flush()
    payload = PersonSaid(message_id=message.id, author=author, text=text, agent=agent_id, now=now)
    return message, events.record(session, project.id, payload, agent_id=agent_id)


def take(session: Session, project_id: str, agent_id: str, iteration_id: str) -> list[Heard]:
    """The messages waiting for this agent, now marked read by ``iteration_id``, oldest first.

    A later attempt of the same iteration reads the ones its earlier attempt took again (they are
    in the first message it rebuilds); a message another iteration took is gone.
    """
    waiting = session.scalars(
        select(PersonMessage)
        .where(
            PersonMessage.project_id == project_id,
            or_(PersonMessage.agent_id.is_(None), PersonMessage.agent_id == agent_id),
            or_(PersonMessage.delivered_at.is_(None), PersonMessage.delivered_iteration_id == iteration_id),
        )
        .order_by(PersonMessage.created_at, PersonMessage.id)
    ).all()
    taken: list[Heard] = []
    for message in waiting:
        if message.delivered_iteration_id != iteration_id:
            claimed = session.execute(
                update(PersonMessage)
                .where(PersonMessage.id == message.id, PersonMessage.delivered_at.is_(None))
                .values(delivered_at=utcnow(), delivered_iteration_id=iteration_id)
                .execution_options(synchronize_session=False)
            )
            if claimed.rowcount != 1:  # type: ignore[attr-defined]
                continue
        taken.append(Heard(message.id, message.author, message.text, message.now))
    return taken


def interrupts(session: Session, project_id: str, agent_id: str) -> bool:
    """Whether a ``--now`` message waits for this agent: its turn ends after the tool call in
    flight (the message itself is taken at the turn boundary that follows, by :func:`take`)."""
    return (
        session.scalar(
            select(PersonMessage.id)
            .where(
                PersonMessage.project_id == project_id,
                or_(PersonMessage.agent_id.is_(None), PersonMessage.agent_id == agent_id),
                PersonMessage.delivered_at.is_(None),
                PersonMessage.now.is_(True),
            )
            .limit(1)
        )
        is not None
    )


def quoted(heard: Sequence[Heard]) -> str:
    """The messages as one text block for the agent: each a person's words, quoted."""
    parts = []
    for message in heard:
        body = "\n".join(f"> {line}" for line in message.text.splitlines() or [""])
        parts.append(f"A person ({message.author}) says to you:\n{body}")
    return "\n\n".join(parts)
