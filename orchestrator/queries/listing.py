"""The projects list of the dashboard: one page of a tenant's projects, newest first, with what
the list shows of each (workflow, iteration n of max, spent vs limit, why it paused or stopped).

A page reads the page's projects and their root agents only, whatever the number of projects
(keyset pagination on ``(created_at, id)``: no OFFSET scan); tests/benchmarks/bench_dashboard.py
holds it to that.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pydantic import BaseModel
from sqlalchemy import Select, and_, func, or_, select

from shared.db import session_scope
from shared.models import Agent, PauseReason, Project, ProjectStatus

PAGE_SIZE = 25


class ProjectRow(BaseModel):
    """One line of the projects list."""

    id: str
    name: str
    status: ProjectStatus
    workflow: str
    iteration: int
    """The furthest iteration any of its root agents has reached."""
    max_iterations: int
    spent_usd: Decimal
    limit_usd: Decimal
    created_at: datetime
    pause_reason: PauseReason | None
    status_reason: str | None


class ProjectPage(BaseModel):
    rows: list[ProjectRow]
    next_cursor: str | None
    """Pass as ``after`` for the next page; None on the last one."""


def _cursor(row: Project) -> str:
    return f"{row.created_at.isoformat()}~{row.id}"


def _parse_cursor(cursor: str) -> tuple[datetime, str] | None:
    stamp, _, project_id = cursor.partition("~")
    try:
        return datetime.fromisoformat(stamp), project_id
    except ValueError:
        return None


def page_query(
    *, tenant_id: str | None, status: ProjectStatus | None, after: str | None, page_size: int
) -> Select[Project]:
    """The statement that reads one page (and one row more, to know whether another follows)."""
    query = select(Project).order_by(Project.created_at.desc(), Project.id.desc()).limit(page_size + 1)
    if tenant_id is not None:
        query = query.where(Project.tenant_id == tenant_id)
    if status is not None:
        query = query.where(Project.status == status)
    position = _parse_cursor(after) if after else None
    if position is not None:
        stamp, project_id = position
        query = query.where(
            or_(Project.created_at < stamp, and_(Project.created_at == stamp, Project.id < project_id))
        )
    return query


def project_page(
    *,
    tenant_id: str | None,
    status: ProjectStatus | None = None,
    after: str | None = None,
    page_size: int = PAGE_SIZE,
) -> ProjectPage:
    """A page of projects (a tenant's own; every project for the cluster, ``tenant_id`` None).

    ``after`` is the previous page's ``next_cursor``; one that cannot be read starts from the top.
    """
    query = page_query(tenant_id=tenant_id, status=status, after=after, page_size=page_size)
    with session_scope() as session:
        projects = list(session.scalars(query))
        more = len(projects) > page_size
        projects = projects[:page_size]
        ids = [p.id for p in projects]
        reached = dict(
            session.execute(
                select(Agent.project_id, func.max(Agent.iterations))
                .where(Agent.project_id.in_(ids), Agent.depth == 0)
                .group_by(Agent.project_id)
            ).all()
        )
        rows = [
            ProjectRow(
                id=p.id,
                name=p.name,
                status=p.status,
                workflow=str(p.config.get("workflow", "ralph")),
                iteration=int(reached.get(p.id) or 0),
                max_iterations=int(p.config.get("max_iterations", 0)),
                spent_usd=p.spent_usd,
                limit_usd=p.budget_limit_usd,
                created_at=p.created_at,
                pause_reason=p.pause_reason,
                status_reason=p.status_reason,
            )
            for p in projects
        ]
    return ProjectPage(rows=rows, next_cursor=_cursor(projects[-1]) if more and projects else None)
