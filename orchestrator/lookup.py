"""Looking up rows the coordinator acts on, with the error a caller shows the user."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.errors import NotFound
from shared.models import Project


def get_project_row(session: Session, project_id: str, *, lock: bool = False) -> Project:
    query = select(Project).where(Project.id == project_id)
    if lock:
        query = query.with_for_update()
    project = session.scalars(query).one_or_none()
    if project is None:
        msg = f"no project {project_id!r}; `raas ls` lists your projects"
        raise NotFound(msg)
    return project
