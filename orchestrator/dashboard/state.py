"""The project page's one store starts from this: the project, its tasks and its agents as the
database holds them now (the rows, never a replay of events), and the budget meter; read again
whenever the page's stream says something changed."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select

from orchestrator.dashboard import rounds
from orchestrator.queries import cost_series
from orchestrator.queries.costs import CALL_SUMS, CostLine, cost_line
from orchestrator.scheduling.lookup import get_project_row
from shared.db import session_scope
from shared.models import Agent, Iteration, IterationStatus, Message, Project, Task
from shared.schemas import IterationOut


def _usd(value: Decimal | None) -> str:
    return str(value if value is not None else Decimal(0))


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def project_state(project_id: str) -> dict[str, Any]:
    """The project, its tasks and agents as the database holds them now (one read)."""
    with session_scope() as session:
        project = get_project_row(session, project_id)
        tasks = session.scalars(
            select(Task).where(Task.project_id == project_id).order_by(Task.wave, Task.key)
        ).all()
        agents = session.scalars(
            select(Agent).where(Agent.project_id == project_id).order_by(Agent.created_at, Agent.id)
        ).all()
        spans: dict[str, tuple[datetime | None, datetime | None, int]] = {}
        unadvanced = 0
        for agent_id, first, last, running, waiting in session.execute(
            select(
                Iteration.agent_id,
                func.min(Iteration.started_at),
                func.max(Iteration.finished_at),
                func.count(Iteration.id).filter(Iteration.finished_at.is_(None)),
                func.count(Iteration.id).filter(
                    Iteration.status.in_([IterationStatus.SUCCEEDED, IterationStatus.FAILED]),
                    Iteration.advanced.is_(False),
                ),
            )
            .where(Iteration.project_id == project_id)
            .group_by(Iteration.agent_id)
        ):
            spans[agent_id] = (first, last, running)
            unadvanced += waiting
        calls = {
            row[0]: cost_line(row[0], tuple(row[1:]))
            for row in session.execute(
                select(Message.agent_id, *CALL_SUMS)
                .where(Message.project_id == project_id, Message.role == "assistant")
                .group_by(Message.agent_id)
            )
        }
        keys = {t.id: t.key for t in tasks}
        state: dict[str, Any] = {
            # An iteration has ended and the coordinator has not yet acted on it: the rows are about
            # to change (an agent done, its parent scheduled) with no event to say so, because
            # an advance publishes none of its own. The page reads the state again until it settles.
            "project": {**_project(project), "settling": unadvanced > 0 and not project.status.is_terminal},
            "tasks": [
                {
                    "key": t.key,
                    "title": t.title,
                    "category": t.category,
                    "kind": t.kind.value,
                    "status": t.status.value,
                    "wave": t.wave,
                    "depends_on": list(t.depends_on),
                }
                for t in tasks
            ],
            "agents": [_agent(a, keys, spans.get(a.id), calls.get(a.id)) for a in agents],
        }
    state["meter"] = cost_series.budget_meter(project_id).model_dump(mode="json")
    follow = rounds.pr_rounds(project_id)
    state["pull_request"] = follow.model_dump(mode="json") if follow is not None else None
    return state


def current_prompt(project_id: str) -> str:
    """PROMPT.md as the project's iterations read it now."""
    with session_scope() as session:
        return get_project_row(session, project_id).prompt


def _project(project: Project) -> dict[str, Any]:
    return {
        "id": project.id,
        "name": project.name,
        "status": project.status.value,
        "terminal": project.status.is_terminal,
        "status_reason": project.status_reason,
        "pause_reason": project.pause_reason.value if project.pause_reason else None,
        "spent_usd": _usd(project.spent_usd),
        "reserved_usd": _usd(project.reserved_usd),
        "limit_usd": _usd(project.budget_limit_usd),
        "last_event_seq": project.last_event_seq,
        "prompt": project.prompt,
        "created_at": _iso(project.created_at),
        "started_at": _iso(project.started_at),
        "finished_at": _iso(project.finished_at),
    }


def _agent(
    agent: Agent,
    keys: dict[str, str],
    span: tuple[datetime | None, datetime | None, int] | None,
    calls: CostLine | None,
) -> dict[str, Any]:
    first, last, running = span or (None, None, 0)
    return {
        "id": agent.id,
        "category": agent.category,
        "status": agent.status.value,
        "task": keys.get(agent.task_id or ""),
        "parent_id": agent.parent_id,
        # A subagent nobody's iteration spawned was made before its parent worked (a pipeline's
        # research): it feeds its parent, and the graph draws it before it.
        "feeds_parent": agent.parent_id is not None and agent.spawned_by is None,
        "depth": agent.depth,
        "iterations": agent.iterations,
        "input_tokens": agent.input_tokens,
        "output_tokens": agent.output_tokens,
        "cost_usd": _usd(agent.cost_usd),
        "calls": calls.calls if calls else 0,
        "cache_write_tokens": calls.tokens.cache_creation_input_tokens if calls else 0,
        "cache_read_tokens": calls.tokens.cache_read_input_tokens if calls else 0,
        "started_at": _iso(first),
        "finished_at": _iso(last) if not running else None,
    }


def iteration_outcomes(project_id: str, ids: list[str]) -> dict[str, IterationOut]:
    """These iterations of the project (the costs section's receipts shown), by id."""
    with session_scope() as session:
        found = session.scalars(
            select(Iteration).where(Iteration.project_id == project_id, Iteration.id.in_(ids))
        ).all()
    return {it.id: IterationOut.model_validate(it) for it in found}
