"""The project page's timeline: its events newest first, a page at a time, filtered by agent,
task, event type and errors, and searched (the page's state is ``state``'s).

A tool call and its result are one row: the ``agent_tool_call`` event carries the result
(``tool_executed`` with the same ``tool_use_id``) and the time between them. A result without a
call (the validator's check command) is a row of its own. Bad filters answer
:class:`~shared.errors.QueryRefused` (400) naming what is wrong and what to send instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import String, and_, cast, not_, or_, select
from sqlalchemy.orm import Session

from orchestrator.scheduling.lookup import get_project_row
from shared import event_payloads, events
from shared.db import session_scope
from shared.errors import QueryRefused
from shared.models import Agent, Event, Iteration, Task

PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
SEARCH_CHARS = 200
RESULT_WINDOW = 5000  # how many events after its call a tool's result is looked for
ERROR_TYPES = frozenset(
    {
        events.ITERATION_ERROR,
        events.PROJECT_FAILED,
        events.BUDGET_EXCEEDED,
        events.CIRCUIT_BREAKER_TRIGGERED,
        events.API_KEY_REQUIRED,
        events.DELIVERY_FAILED,
        events.LLM_RETRY,
    }
)


def event_types() -> list[str]:
    """Every event type the product writes (each payload model names its own)."""
    found: set[str] = set()
    pending = list(events.EventData.__subclasses__())
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if isinstance(getattr(cls, "TYPE", None), str):
            found.add(cls.TYPE)
    assert event_payloads  # imported so that every payload model is defined
    return sorted(found)


@dataclass(frozen=True)
class Filters:
    agent: str | None = None
    task: str | None = None
    type: str | None = None
    errors: bool = False
    q: str | None = None


def check_filters(project_id: str, filters: Filters) -> None:
    """Raise :class:`~shared.errors.QueryRefused` for a filter naming nothing of this project."""
    if filters.type is not None and filters.type not in event_types():
        msg = f"no event type {filters.type!r}; use one of {', '.join(event_types())}"
        raise QueryRefused(msg)
    if filters.q is not None and len(filters.q) > SEARCH_CHARS:
        msg = f"a search of {len(filters.q)} characters is too long; use at most {SEARCH_CHARS}"
        raise QueryRefused(msg)
    with session_scope() as session:
        if filters.agent is not None and not session.scalar(
            select(Agent.id).where(Agent.project_id == project_id, Agent.id == filters.agent)
        ):
            msg = f"no agent {filters.agent!r} in project {project_id}; pick one from the agent list"
            raise QueryRefused(msg)
        if filters.task is not None and not session.scalar(
            select(Task.id).where(Task.project_id == project_id, Task.key == filters.task)
        ):
            msg = f"no task {filters.task!r} in project {project_id}; pick one from the graph"
            raise QueryRefused(msg)


def _tool_use_id() -> Any:
    return Event.data["tool_use_id"].as_string()


def _where(project_id: str, filters: Filters) -> list[Any]:
    paired = and_(Event.type == events.TOOL_EXECUTED, _tool_use_id().is_not(None))
    where: list[Any] = [Event.project_id == project_id, not_(paired)]
    if filters.agent is not None:
        where.append(Event.agent_id == filters.agent)
    if filters.task is not None:
        agent_ids = select(Agent.id).join(Task, Task.id == Agent.task_id)
        agent_ids = agent_ids.where(Task.project_id == project_id, Task.key == filters.task)
        where.append(Event.agent_id.in_(agent_ids))
    if filters.type is not None:
        shown = events.AGENT_TOOL_CALL if filters.type == events.TOOL_EXECUTED else filters.type
        where.append(Event.type == shown)
    if filters.q:
        needle = "%" + filters.q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append(
            or_(Event.type.ilike(needle, escape="\\"), cast(Event.data, String).ilike(needle, escape="\\"))
        )
    if filters.errors:
        failed = select(_tool_use_id()).where(
            Event.project_id == project_id,
            Event.type == events.TOOL_EXECUTED,
            Event.data["is_error"].as_boolean().is_(True),
        )
        where.append(
            or_(
                Event.type.in_(ERROR_TYPES),
                and_(Event.type == events.AGENT_TOOL_CALL, _tool_use_id().in_(failed.scalar_subquery())),
                and_(Event.type == events.TOOL_EXECUTED, Event.data["is_error"].as_boolean().is_(True)),
            )
        )
    return where


def timeline_page(
    project_id: str, filters: Filters, before: int | None = None, limit: int = PAGE_SIZE
) -> dict[str, Any]:
    """Up to ``limit`` rows with seq below ``before`` (the newest when None), newest first;
    ``older`` is the ``before`` of the next page, None at the first event."""
    if not 1 <= limit <= MAX_PAGE_SIZE:
        msg = f"a page of {limit} rows is out of range; ask for 1 to {MAX_PAGE_SIZE}"
        raise QueryRefused(msg)
    check_filters(project_id, filters)
    with session_scope() as session:
        last = get_project_row(session, project_id).last_event_seq
        if before is not None and not 1 <= before <= last + 1:
            msg = f"page before event {before} is out of range; this project's events are 1 to {last}"
            raise QueryRefused(msg)
        query = select(Event).where(*_where(project_id, filters))
        if before is not None:
            query = query.where(Event.seq < before)
        rows = session.scalars(query.order_by(Event.seq.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        rows = rows[:limit]
        results = _results(session, project_id, [r for r in rows if r.type == events.AGENT_TOOL_CALL])
        spans = _iteration_spans(session, [r.iteration_id for r in rows if r.iteration_id])
        shown = [_row(r, results, spans) for r in rows]
    return {"rows": shown, "older": rows[-1].seq if more and rows else None, "last_event_seq": last}


def _results(session: Session, project_id: str, calls: list[Event]) -> dict[str, Event]:
    """The results of ``calls``, looked for in the seqs after them (``RESULT_WINDOW`` past the
    last: a result follows its call within its iteration; the (project_id, seq) index then reads
    a page's worth of rows, not the whole history). One farther off leaves its call 'running'."""
    ids = [str(c.data.get("tool_use_id")) for c in calls if c.data.get("tool_use_id")]
    if not ids:
        return {}
    found = session.scalars(
        select(Event).where(
            Event.project_id == project_id,
            Event.seq > min(c.seq for c in calls),
            Event.seq <= max(c.seq for c in calls) + RESULT_WINDOW,
            Event.type == events.TOOL_EXECUTED,
            _tool_use_id().in_(ids),
        )
    ).all()
    return {str(e.data["tool_use_id"]): e for e in found}


def _iteration_spans(session: Session, ids: list[str]) -> dict[str, tuple[datetime | None, datetime | None]]:
    if not ids:
        return {}
    found = session.execute(
        select(Iteration.id, Iteration.started_at, Iteration.finished_at).where(Iteration.id.in_(set(ids)))
    )
    return {i: (started, finished) for i, started, finished in found}


def event_row(event: Any) -> dict[str, Any]:
    """One event as a timeline row (``event`` an Event row or an EventOut)."""
    return {
        "seq": event.seq,
        "type": event.type,
        "agent_id": event.agent_id,
        "iteration_id": event.iteration_id,
        "ts": event.ts.isoformat(),
        "data": event.data,
    }


def _row(
    event: Event, results: dict[str, Event], spans: dict[str, tuple[datetime | None, datetime | None]]
) -> dict[str, Any]:
    row = event_row(event)
    result = results.get(str(event.data.get("tool_use_id"))) if event.type == events.AGENT_TOOL_CALL else None
    if result is not None:
        row["result"] = event_row(result)
        row["duration_s"] = max(0.0, (result.ts - event.ts).total_seconds())
    if event.type in (events.ITERATION_COMPLETE, events.ITERATION_ERROR) and event.iteration_id:
        started, finished = spans.get(event.iteration_id, (None, None))
        if started and finished:
            row["duration_s"] = max(0.0, (finished - started).total_seconds())
    return row


def recent_output(project_id: str, agent_id: str, limit: int = 200) -> list[dict[str, Any]]:
    """The agent's latest output (its last ``limit`` chunks) as messages, oldest first: chunks
    next to each other in the stream make one message; another event between them (a tool call,
    a new iteration) starts the next. The inspector shows it when it opens mid-turn."""
    with session_scope() as session:
        rows = session.execute(
            select(Event.seq, Event.iteration_id, Event.data["text"].as_string())
            .where(
                Event.project_id == project_id,
                Event.agent_id == agent_id,
                Event.type == events.AGENT_OUTPUT_CHUNK,
            )
            .order_by(Event.seq.desc())
            .limit(limit)
        ).all()
    messages: list[dict[str, Any]] = []
    last_seq = None
    for seq, iteration_id, text in reversed(rows):
        if messages and last_seq == seq - 1 and messages[-1]["iteration_id"] == iteration_id:
            messages[-1]["text"] += text or ""
        else:
            messages.append({"iteration_id": iteration_id, "text": text or "", "seq": seq})
        last_seq = seq
    return messages
