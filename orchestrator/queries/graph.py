"""A project's plan and agent tree, for ``raas graph``: tasks by wave, agents with parent edges."""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel
from sqlalchemy import select

from orchestrator.scheduling.lookup import get_project_row
from shared import events
from shared.dag import TaskKind
from shared.db import session_scope
from shared.models import Agent, Event, Task, TaskStatus
from shared.schemas import AgentNode


class TaskNode(BaseModel):
    key: str
    title: str
    category: str
    kind: TaskKind
    status: TaskStatus
    depends_on: list[str]


class GraphAgent(AgentNode):
    """An agent of the tree with what it has done so far (its parent is in the edges)."""

    type: str  # "root" or "sub"
    tokens: int
    cost_usd: Decimal
    last_output: str | None


class Edge(BaseModel):
    parent: str
    child: str


class ProjectGraph(BaseModel):
    project_id: str
    waves: list[list[TaskNode]]
    agents: list[GraphAgent]
    edges: list[Edge]


def project_graph(project_id: str) -> ProjectGraph:
    with session_scope() as session:
        get_project_row(session, project_id)
        tasks = session.scalars(
            select(Task).where(Task.project_id == project_id).order_by(Task.wave, Task.key)
        ).all()
        agents = session.scalars(
            select(Agent).where(Agent.project_id == project_id).order_by(Agent.created_at)
        ).all()
        keys = {t.id: t.key for t in tasks}
        waves: list[list[TaskNode]] = []
        for task in tasks:
            while len(waves) <= task.wave:
                waves.append([])
            waves[task.wave].append(
                TaskNode(
                    key=task.key,
                    title=task.title,
                    category=task.category,
                    kind=task.kind,
                    status=task.status,
                    depends_on=list(task.depends_on),
                )
            )
        nodes = [
            GraphAgent(
                id=a.id,
                type="sub" if a.parent_id else "root",
                category=a.category,
                status=a.status,
                task=keys.get(a.task_id or ""),
                depth=a.depth,
                iterations=a.iterations,
                tokens=a.input_tokens + a.output_tokens,
                cost_usd=a.cost_usd,
                last_output=session.scalar(
                    select(Event.data["text"].as_string())
                    .where(
                        Event.project_id == project_id,
                        Event.agent_id == a.id,
                        Event.type == events.AGENT_OUTPUT_CHUNK,
                    )
                    .order_by(Event.seq.desc())
                    .limit(1)
                ),
            )
            for a in agents
        ]
        edges = [Edge(parent=a.parent_id, child=a.id) for a in agents if a.parent_id]
    return ProjectGraph(project_id=project_id, waves=waves, agents=nodes, edges=edges)
