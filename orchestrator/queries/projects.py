"""Reading projects: the detail, the list, their config, event history and diffs."""

from __future__ import annotations

from sqlalchemy import func, select

from orchestrator.queries.memory import memory_size
from orchestrator.scheduling import workspace
from orchestrator.scheduling.lookup import get_project_row
from orchestrator.workspaces import WorkspaceStore
from shared import events
from shared.db import session_scope
from shared.errors import Conflict, NotFound
from shared.models import Agent, Delivery, Iteration, Message, Project
from shared.schemas import AgentOut, DeliveryOut, EventOut, IterationOut, ProjectDetail, ProjectOut


def project_detail(project_id: str) -> ProjectDetail:
    with session_scope() as session:
        project = get_project_row(session, project_id)
        agents = session.scalars(
            select(Agent).where(Agent.project_id == project_id).order_by(Agent.created_at)
        )
        iterations = session.scalars(
            select(Iteration).where(Iteration.project_id == project_id).order_by(Iteration.created_at)
        )
        tokens = session.execute(
            select(
                func.coalesce(func.sum(Message.input_tokens), 0),
                func.coalesce(func.sum(Message.output_tokens), 0),
            ).where(Message.project_id == project_id)
        ).one()
        return ProjectDetail(
            **ProjectOut.model_validate(project).model_dump(),
            agents=[AgentOut.model_validate(a) for a in agents],
            iterations=[IterationOut.model_validate(i) for i in iterations],
            input_tokens=int(tokens[0]),
            output_tokens=int(tokens[1]),
            last_event_seq=project.last_event_seq,
            memory=memory_size(session, project),
            deliveries=[
                DeliveryOut.model_validate(d)
                for d in session.scalars(
                    select(Delivery).where(Delivery.project_id == project_id).order_by(Delivery.created_at)
                )
            ],
        )


def get_project(project_id: str) -> ProjectOut:
    with session_scope() as session:
        return ProjectOut.model_validate(get_project_row(session, project_id))


def list_projects(limit: int = 100, *, tenant_id: str | None = None) -> list[ProjectOut]:
    """The newest projects: a tenant's own, or (tenant_id None, the cluster) everyone's."""
    query = select(Project).order_by(Project.created_at.desc()).limit(limit)
    if tenant_id is not None:
        query = query.where(Project.tenant_id == tenant_id)
    with session_scope() as session:
        rows = session.scalars(query)
        return [ProjectOut.model_validate(p) for p in rows]


def event_history(project_id: str, after_seq: int = 0) -> list[EventOut]:
    with session_scope() as session:
        return events.history(session, project_id, after_seq, limit=100_000)


def project_diff(store: WorkspaceStore, project_id: str, iteration_number: int | None) -> str:
    """What one iteration changed (its commits), or the whole project since its first commit."""
    with session_scope() as session:
        project = get_project_row(session, project_id)
        if iteration_number is None:
            bare = store.read(project.id)
            return workspace.diff(bare, workspace.root_commit(bare), "main")
        iteration = session.scalars(
            select(Iteration)
            .join(Agent, Agent.id == Iteration.agent_id)
            .where(Iteration.project_id == project_id, Iteration.number == iteration_number, Agent.depth == 0)
        ).first()
        if iteration is None:
            msg = f"project {project_id} has no iteration {iteration_number}"
            raise NotFound(msg)
        if iteration.base_sha is None or iteration.commit_sha is None:
            msg = f"iteration {iteration_number} of {project_id} has not committed anything yet"
            raise Conflict(msg)
        return workspace.diff(store.read(project.id), iteration.base_sha, iteration.commit_sha)
