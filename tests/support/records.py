"""Reading what an engine test's iterations left behind: rows, events, requests and workspace.

The engine tests drive real iterations through :mod:`tests.support.engine`; these helpers only read
(the database through the models, the scripted model's request log, the workspace repository).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from orchestrator.workspaces import get_store
from shared import events
from shared.db import session_scope
from shared.git import git
from shared.models import Agent, Iteration, Message, Project
from shared.schemas import EventOut
from tests.support.engine import Engine

STREAMS = Path(__file__).resolve().parent.parent / "fixtures" / "anthropic-streams"


def replay(name: str, **step: Any) -> dict[str, Any]:
    """A script step replaying one of the recorded streams (by absolute path)."""
    return {"replay": str(STREAMS / name), **step}


def text(words: str, **step: Any) -> dict[str, Any]:
    """A script step: an assistant turn of text only (ends the turn)."""
    return {"content": [{"type": "text", "text": words}], **step}


def tool(name: str, args: dict[str, Any], use_id: str | None = None, **step: Any) -> dict[str, Any]:
    """A script step: one tool call (``use_id`` fixes its tool_use id)."""
    block: dict[str, Any] = {"type": "tool_use", "name": name, "input": args}
    if use_id is not None:
        block["id"] = use_id
    return {"content": [block], **step}


def project(project_id: str) -> Project:
    with session_scope() as session:
        return session.get_one(Project, project_id)


def agent(project_id: str) -> Agent:
    with session_scope() as session:
        return session.scalars(select(Agent).where(Agent.project_id == project_id)).one()


def iterations(project_id: str) -> list[Iteration]:
    with session_scope() as session:
        return list(
            session.scalars(
                select(Iteration).where(Iteration.project_id == project_id).order_by(Iteration.number)
            )
        )


def messages(project_id: str) -> list[Message]:
    with session_scope() as session:
        return list(
            session.scalars(
                select(Message)
                .where(Message.project_id == project_id)
                .order_by(Message.iteration_id, Message.attempt, Message.seq)
            )
        )


def event_log(project_id: str, type_: str | None = None) -> list[EventOut]:
    with session_scope() as session:
        found = events.history(session, project_id, limit=100_000)
    return [event for event in found if type_ is None or event.type == type_]


def bodies(eng: Engine, project_id: str) -> list[dict[str, Any]]:
    """The JSON bodies of the project's requests to the model, in order."""
    return [request.body for request in eng.requests(project_id)]


def tool_results(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of a message (``body["messages"][-1]``: what the model was just told)."""
    return [b for b in message["content"] if isinstance(b, dict) and b.get("type") == "tool_result"]


def opening_text(message: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in message["content"] if block.get("type") == "text")


def workspace_git(eng: Engine, project_id: str, *args: str) -> str:
    """Run git in the coordinator's repository of the project's workspace."""
    return git(get_store(eng.settings).read(project_id), *args)


def everything_recorded(eng: Engine, project_id: str) -> str:
    """Every message, event and request body of the project as one JSON text, to search."""
    return json.dumps(
        {
            "messages": [m.content for m in messages(project_id)],
            "events": [e.data for e in event_log(project_id)],
            "iterations": [[i.summary, i.error] for i in iterations(project_id)],
            "requests": bodies(eng, project_id),
        }
    )
