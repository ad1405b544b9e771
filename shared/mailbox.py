"""Messages between agents: sending one (``send_message``) and delivering it into the
recipient's next iteration, exactly once and in the order they were sent.

A message is addressed to ``parent``, to an agent of the project by its id, or to ``broadcast``
(every other agent of the project that will run again); it is stored once per recipient. The
claim of the recipient's next iteration takes its undelivered messages (``delivered_to`` is set
to that iteration in the claim's transaction): a later attempt of the same iteration reads the
same ones again, the next iteration reads only newer ones. A send is keyed by its iteration and
tool_use id, so a redelivered iteration never sends twice.

A recipient that will never run again makes the send fail with a message saying so: a completed
or failed agent, a parallel agent whose one iteration has begun, any agent of an ended project.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from shared import events
from shared.errors import InvalidInput
from shared.event_payloads import MessageSent
from shared.memory import ToolCall, plain_text
from shared.models import Agent, AgentMessage, AgentStatus, Project, utcnow
from shared.schemas import AgentMessageOut, EventOut

MESSAGE_CHARS = 8000
PARENT = "parent"
BROADCAST = "broadcast"
_LISTED = 12


def _not_blank(value: str) -> str:
    if not value.strip():
        kind, msg = "blank_message", "the message is blank"
        raise PydanticCustomError(kind, msg)
    return plain_text(value)


#: A message's text: 1 to 8000 characters, not blank.
MessageText = Annotated[str, Field(min_length=1, max_length=MESSAGE_CHARS), AfterValidator(_not_blank)]
#: Whom to send it to: parent, broadcast, or an agent's id.
Recipient = Annotated[str, Field(min_length=1, max_length=100)]


@dataclass(frozen=True)
class Sent:
    """Who a message went to, with the event to publish after the commit (none when the tool
    call had sent it already: ``repeated``)."""

    recipients: list[str]
    repeated: bool = False
    event: EventOut | None = None


def will_run_again(agent: Agent) -> bool:
    """Whether the agent can still begin an iteration that would read a message."""
    if agent.status in (AgentStatus.COMPLETED, AgentStatus.ERROR):
        return False
    # A parallel subagent's one iteration is its whole job.
    return not (agent.parallel and (agent.status == AgentStatus.WORKING or agent.iterations > 0))


def send(session: Session, sender: ToolCall, to: str, text: str) -> Sent:
    """Send ``text`` from the sender's agent to ``to``: parent, broadcast, or an agent's id.

    Raises:
        InvalidInput: no such recipient, the sender itself, or no recipient will run again.
            Nothing is sent.
    """
    done = session.scalars(
        select(AgentMessage.recipient_id)
        .where(
            AgentMessage.iteration_id == sender.iteration_id, AgentMessage.tool_use_id == sender.tool_use_id
        )
        .order_by(AgentMessage.id)
    ).all()
    if done:
        return Sent(list(done), repeated=True)
    project = session.get_one(Project, sender.project_id)
    if project.status.is_terminal:
        msg = f"the project has ended ({project.status.value}); no agent will read the message"
        raise InvalidInput(msg)
    me = session.get_one(Agent, sender.agent_id)
    recipients = _recipients(session, me, to)
    now = utcnow()
    session.add_all(
        AgentMessage(
            project_id=sender.project_id,
            sender_id=sender.agent_id,
            iteration_id=sender.iteration_id,
            tool_use_id=sender.tool_use_id,
            recipient_id=agent.id,
            broadcast=to == BROADCAST,
            text=text,
            created_at=now,
        )
        for agent in recipients
    )
    ids = [agent.id for agent in recipients]
    event = events.record(
        session,
        sender.project_id,
        MessageSent(to=to, recipients=ids, text=text, tool_use_id=sender.tool_use_id),
        agent_id=sender.agent_id,
        iteration_id=sender.iteration_id,
    )
    return Sent(ids, event=event)


def _recipients(session: Session, me: Agent, to: str) -> list[Agent]:
    if to == BROADCAST:
        others = session.scalars(
            select(Agent)
            .where(Agent.project_id == me.project_id, Agent.id != me.id)
            .order_by(Agent.created_at, Agent.id)
        ).all()
        listening = [agent for agent in others if will_run_again(agent)]
        if not listening:
            msg = "no other agent of the project will run again to read a broadcast"
            raise InvalidInput(msg)
        return listening
    if to == PARENT:
        if me.parent_id is None:
            msg = "you have no parent agent; send to an agent id or broadcast"
            raise InvalidInput(msg)
        to = me.parent_id
    if to == me.id:
        msg = "you cannot send a message to yourself; leave a note with memory_write instead"
        raise InvalidInput(msg)
    agent = session.get(Agent, to)
    if agent is None or agent.project_id != me.project_id:
        raise InvalidInput(_unknown(session, me, to))
    if not will_run_again(agent):
        msg = f"agent {agent.id} ({agent.category}, {agent.status.value}) will not run again to read it"
        raise InvalidInput(msg)
    return [agent]


def _unknown(session: Session, me: Agent, to: str) -> str:
    agents = session.execute(
        select(Agent.id, Agent.category)
        .where(Agent.project_id == me.project_id, Agent.id != me.id)
        .order_by(Agent.created_at, Agent.id)
        .limit(_LISTED + 1)
    ).all()
    listed = ", ".join(f"{agent_id} ({category})" for agent_id, category in agents[:_LISTED])
    more = ", …" if len(agents) > _LISTED else ""
    return (
        f"unknown recipient {to[:60]!r}: send to parent, broadcast, or an agent of this project"
        f"{': ' + listed + more if listed else ' (there is no other)'}"
    )


def deliver(session: Session, agent_id: str, iteration_id: str) -> tuple[AgentMessageOut, ...]:
    """The agent's messages for this iteration, in the order they were sent: those not delivered
    before are taken now (a later attempt of the iteration reads the same ones again)."""
    session.execute(
        update(AgentMessage)
        .where(AgentMessage.recipient_id == agent_id, AgentMessage.delivered_to.is_(None))
        .values(delivered_to=iteration_id)
        .execution_options(synchronize_session=False)
    )
    rows = session.execute(
        select(AgentMessage, Agent.category)
        .join(Agent, Agent.id == AgentMessage.sender_id)
        .where(AgentMessage.delivered_to == iteration_id, AgentMessage.recipient_id == agent_id)
        .order_by(AgentMessage.id)
    ).all()
    return tuple(_out(message, category) for message, category in rows)


def project_messages(session: Session, project_id: str) -> Sequence[tuple[AgentMessage, str]]:
    """Every message of the project (one row per recipient) with its sender's category, in order."""
    return session.execute(
        select(AgentMessage, Agent.category)
        .join(Agent, Agent.id == AgentMessage.sender_id)
        .where(AgentMessage.project_id == project_id)
        .order_by(AgentMessage.id)
    ).all()


def _out(message: AgentMessage, category: str) -> AgentMessageOut:
    return AgentMessageOut(
        id=message.id,
        sender_id=message.sender_id,
        sender_category=category,
        recipient_id=message.recipient_id,
        broadcast=message.broadcast,
        text=message.text,
        created_at=message.created_at,
    )
