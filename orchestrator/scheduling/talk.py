"""People talking to a running agent (``raas say``): the coordinator's side of shared.said."""

from __future__ import annotations

from pydantic import BaseModel

from orchestrator.scheduling.dispatch import Dispatcher
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import transaction
from shared import said
from shared.events import EventBus


class SaidOut(BaseModel):
    """What was said, and its place in the project's timeline."""

    id: str
    project_id: str
    agent_id: str | None
    seq: int


def say_to(
    project_id: str,
    text: str,
    *,
    author: str,
    agent_id: str | None,
    now: bool,
    dispatcher: Dispatcher,
    bus: EventBus,
) -> SaidOut:
    """Leave ``text`` for the project's agent; it reads it at its next turn boundary.

    Raises:
        NotFound: no such project or agent. Conflict: the project has ended. InvalidInput: the text.
    """
    with transaction(dispatcher, bus) as out:
        project = get_project_row(out.session, project_id, lock=True)
        message, event = said.say(out.session, project, text, author=author, agent_id=agent_id, now=now)
        out.events.append(event)
        return SaidOut(id=message.id, project_id=project_id, agent_id=agent_id, seq=event.seq)
