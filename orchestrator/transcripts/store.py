"""Reading a project's transcript from the database: every stored message of every attempt, in
the order they were written, with the agent tree, the subagents' prompts and reports, the project's
writes to the memory bank and the messages its agents sent each other.
"""

from __future__ import annotations

from collections import defaultdict
from decimal import Decimal
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.scheduling.lookup import get_project_row
from orchestrator.transcripts.model import (
    AgentMail,
    Block,
    MemoryWrite,
    ProjectInfo,
    RawBlock,
    Subagent,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    Transcript,
    TranscriptAgent,
    TranscriptMessage,
    measure,
)
from shared import mailbox
from shared.db import session_scope
from shared.models import Agent, Iteration, IterationStatus, MemoryVersion, Message, Task
from shared.usage import Usage


def to_block(data: dict[str, Any]) -> Block:
    """A stored content block as a typed block, or a raw one when it is of another shape."""
    kinds: dict[str, type[TextBlock | ToolUseBlock | ToolResultBlock]] = {
        "text": TextBlock,
        "tool_use": ToolUseBlock,
        "tool_result": ToolResultBlock,
    }
    kind = kinds.get(str(data.get("type")))
    if kind is not None:
        try:
            # The SDK adds empty fields (citations: null) that carry nothing.
            return kind.model_validate({k: v for k, v in data.items() if v is not None})
        except ValidationError:
            pass
    return RawBlock(data=data)


def load_transcript(project_id: str, agent: str | None = None) -> Transcript:
    """The transcript of a project (of one agent, with ``agent``) from the database.

    Raises:
        NotFound: no such project, or no such agent in it.
    """
    with session_scope() as session:
        project = get_project_row(session, project_id)
        rows = session.scalars(
            select(Agent).where(Agent.project_id == project_id).order_by(Agent.created_at, Agent.id)
        ).all()
        tasks = dict(session.execute(select(Task.id, Task.key).where(Task.project_id == project_id)).all())
        iterations = session.execute(
            select(
                Iteration.id, Iteration.agent_id, Iteration.number, Iteration.status, Iteration.started_at
            ).where(Iteration.project_id == project_id)
        ).all()
        messages = session.scalars(
            select(Message).where(Message.project_id == project_id).order_by(Message.created_at, Message.id)
        ).all()
        info = ProjectInfo(
            id=project.id,
            name=project.name,
            status=project.status,
            reason=project.status_line,
            model=(project.config or {}).get("model"),
            created_at=project.created_at,
            started_at=project.started_at,
            finished_at=project.finished_at,
        )
        numbers = {i.id: i.number for i in iterations}
        ran: dict[str, list[IterationStatus]] = defaultdict(list)
        for it in iterations:
            if it.started_at is not None:
                ran[it.agent_id].append(it.status)
        agents = _tree(rows, tasks, ran)
        subagents = [
            Subagent(agent=a.id, iteration=numbers.get(a.spawned_by or ""), prompt=a.prompt, report=a.report)
            for a in rows
            if a.parent_id is not None
        ]
        history = [_message(index, m, numbers) for index, m in enumerate(messages, start=1)]
        memory = _memory(session, project_id, numbers)
        mail = _mail(session, project_id, numbers)
    end = info.finished_at or (history[-1].created_at if history else None)
    transcript = Transcript(
        project=info,
        agents=agents,
        messages=history,
        subagents=subagents,
        memory=memory,
        mail=mail,
        metrics=measure(agents, history, info.started_at, end),
    )
    return transcript.for_agent(agent) if agent else transcript


def _tree(rows: Any, tasks: dict[str, str], ran: dict[str, list[IterationStatus]]) -> list[TranscriptAgent]:
    children: dict[str | None, list[Agent]] = defaultdict(list)
    for row in rows:
        children[row.parent_id].append(row)
    ordered: list[TranscriptAgent] = []
    stack = list(reversed(children[None]))
    while stack:
        row = stack.pop()
        statuses = ran.get(row.id, [])
        ordered.append(
            TranscriptAgent(
                id=row.id,
                category=row.category,
                depth=row.depth,
                parent=row.parent_id,
                status=row.status,
                task=tasks.get(row.task_id or ""),
                iterations=len(statuses),
                failed_iterations=statuses.count(IterationStatus.FAILED),
            )
        )
        stack.extend(reversed(children[row.id]))
    return ordered


def _memory(session: Session, project_id: str, numbers: dict[str, int]) -> list[MemoryWrite]:
    """The project's own writes (a bank shared with the tenant holds others' too)."""
    rows = session.scalars(
        select(MemoryVersion)
        .where(MemoryVersion.project_id == project_id)
        .order_by(MemoryVersion.created_at, MemoryVersion.id)
    )
    return [
        MemoryWrite(
            agent=row.agent_id,
            iteration=numbers.get(row.iteration_id, 0),
            created_at=row.created_at,
            key=row.key,
            version=row.version,
            conflict=row.conflict,
            tags=list(row.tags or []),
            value=row.value,
        )
        for row in rows
    ]


def _mail(session: Session, project_id: str, numbers: dict[str, int]) -> list[AgentMail]:
    """One entry per message sent, with all its recipients (stored one row each)."""
    sent: dict[tuple[str, str], AgentMail] = {}
    for row, _category in mailbox.project_messages(session, project_id):
        key = (row.iteration_id, row.tool_use_id)
        if key in sent:
            sent[key].to.append(row.recipient_id)
            continue
        sent[key] = AgentMail(
            agent=row.sender_id,
            iteration=numbers.get(row.iteration_id, 0),
            created_at=row.created_at,
            to=[row.recipient_id],
            broadcast=row.broadcast,
            text=row.text,
        )
    return list(sent.values())


def _message(seq: int, row: Message, numbers: dict[str, int]) -> TranscriptMessage:
    assistant = row.role == "assistant"
    return TranscriptMessage(
        seq=seq,
        agent=row.agent_id,
        iteration=numbers.get(row.iteration_id, 0),
        attempt=row.attempt,
        role="assistant" if assistant else "user",
        created_at=row.created_at,
        content=[to_block(b) if isinstance(b, dict) else RawBlock(data={"value": b}) for b in row.content],
        model=row.model,
        stop_reason=row.stop_reason,
        usage=Usage.model_validate(row, from_attributes=True) if assistant else None,
        cost_usd=_amount(row.cost_usd),
        duration_s=round(row.duration_s, 3) if row.duration_s is not None else None,
    )


def _amount(value: Decimal) -> Decimal:
    # Stored with six places: 0.0045 reads better than 0.004500 and is the same amount.
    normal = value.normalize()
    return normal.quantize(Decimal(1)) if normal == normal.to_integral_value() else normal
