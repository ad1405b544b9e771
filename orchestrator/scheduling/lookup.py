"""Looking up rows the coordinator acts on, with the error a caller shows the user."""

from __future__ import annotations

from sqlalchemy import bindparam, func, select
from sqlalchemy.orm import Session

from shared.errors import NotFound
from shared.models import Agent, AgentStatus, Project

FINISHED_AGENT = (AgentStatus.COMPLETED, AgentStatus.ERROR)

# Built once: locking the project is the first statement of every hand-off.
_PROJECT = select(Project).where(Project.id == bindparam("project_id"))
# Locked rows are read afresh even if the session holds the project already: decisions taken
# under the lock (the budget gate's ``admit``) must see what the lock protects.
_LOCKED_PROJECT = _PROJECT.with_for_update().execution_options(populate_existing=True)


def get_project_row(session: Session, project_id: str, *, lock: bool = False) -> Project:
    query = _LOCKED_PROJECT if lock else _PROJECT
    project = session.scalars(query, {"project_id": project_id}).one_or_none()
    if project is None:
        msg = f"no project {project_id!r}; `raas ls` lists your projects"
        raise NotFound(msg)
    return project


def waiting_for_children(session: Session, agent_id: str) -> bool:
    """Whether any of the agent's subagents is still at work (its next iteration waits for them)."""
    unfinished = session.scalar(
        select(func.count())
        .select_from(Agent)
        .where(Agent.parent_id == agent_id, Agent.status.not_in(FINISHED_AGENT))
    )
    return bool(unfinished)
