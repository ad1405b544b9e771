"""What one notification says, gathered once before its first attempt: the event and the project
as its transaction saw them (the row's payload), the pull request and the diff's size as they
are when it is first sent, and the links to follow.

Every medium renders the same :class:`News`; the webhook sends it as JSON. Texts that agents
or users wrote (the project's name, a reason, a message) stay raw here: each medium escapes
them as it renders them (orchestrator.notify.escape).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.scheduling import approval_links, workspace
from orchestrator.workspaces import WorkspaceStore
from shared import events
from shared.errors import GitError
from shared.git import git
from shared.models import Delivery, DeliveryKind, Notification

log = logging.getLogger(__name__)
_WAITING = events.APPROVAL_WAITING

# The status a project is in once each event is recorded; other types say their own name.
_STATUS = {
    events.PROJECT_COMPLETED: "completed",
    events.PROJECT_FAILED: "failed",
    events.PROJECT_STOPPED: "stopped",
    events.PROJECT_PAUSED: "paused",
    events.BUDGET_WARNING: "budget warning",
}


@dataclass(frozen=True)
class News:
    id: str
    """The notification's id: the webhook's ``webhook-id``, the mail's Message-ID."""
    type: str
    ts: str
    project_id: str | None
    project: str
    """The project's name (as submitted: untrusted text)."""
    status: str
    reason: str | None
    spent_usd: Decimal
    limit_usd: Decimal
    diff_stat: str | None = None
    pull_request_url: str | None = None
    dashboard_url: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    approve_url: str | None = None
    """approval_waiting: signed links that decide it without a session (once, until they expire)."""
    reject_url: str | None = None

    @property
    def headline(self) -> str:
        return f"{self.project}: {self.status}"

    @property
    def cost(self) -> str:
        return f"${self.spent_usd:.4f} of ${self.limit_usd:.2f}"

    def document(self) -> dict[str, Any]:
        """The webhook's JSON body (Standard Webhooks shape: type, timestamp, data)."""
        return {
            "type": self.type,
            "timestamp": self.ts,
            "data": {
                "id": self.id,
                "project": {"id": self.project_id, "name": self.project, "status": self.status},
                "reason": self.reason,
                "spent_usd": str(self.spent_usd),
                "limit_usd": str(self.limit_usd),
                "diff_stat": self.diff_stat,
                "pull_request_url": self.pull_request_url,
                "dashboard_url": self.dashboard_url,
                "approve_url": self.approve_url,
                "reject_url": self.reject_url,
                "event": self.data,
            },
        }


def gather(
    session: Session,
    row: Notification,
    store: WorkspaceStore,
    coordinator_url: str,
    links: approval_links.LinkSigner | None = None,
) -> News:
    """The news of ``row``, with what the database and the workspace say now; ``links`` signs an
    approval's approve and reject links."""
    payload = row.payload
    project: dict[str, Any] = payload.get("project") or {}
    data: dict[str, Any] = payload.get("data") or {}
    project_id = row.project_id
    return News(
        id=row.id,
        type=row.event_type,
        ts=str(payload.get("ts", row.created_at.isoformat())),
        project_id=project_id,
        project=str(project.get("name") or project_id or "-"),
        status=_STATUS.get(row.event_type, row.event_type.replace("_", " ")),
        reason=_reason(row.event_type, project, data),
        spent_usd=Decimal(str(data.get("spent_usd", project.get("spent_usd", 0)))),
        limit_usd=Decimal(str(data.get("limit_usd", project.get("limit_usd", 0)))),
        diff_stat=_diff_stat(store, project_id) if project_id else None,
        pull_request_url=_pull_request(session, project_id) if project_id else None,
        dashboard_url=f"{coordinator_url.rstrip('/')}/projects/{project_id}" if project_id else None,
        data=data,
        **(links.urls(session, data, coordinator_url) if links and row.event_type == _WAITING else {}),
    )


def _reason(event_type: str, project: dict[str, Any], data: dict[str, Any]) -> str | None:
    if event_type == events.PROJECT_PAUSED:
        return f"{data.get('reason')}: {data.get('message')}"
    if event_type == events.BUDGET_WARNING:
        spent, limit = Decimal(str(data.get("spent_usd"))), Decimal(str(data.get("limit_usd")))
        return f"spent ${spent:.4f} of ${limit:.2f}"
    for key in ("reason", "message", "title"):
        if isinstance(data.get(key), str):
            return str(data[key])
    return project.get("reason")


def _pull_request(session: Session, project_id: str) -> str | None:
    return session.scalar(
        select(Delivery.pull_request_url).where(
            Delivery.project_id == project_id,
            Delivery.kind == DeliveryKind.PROJECT,
            Delivery.pull_request_url.is_not(None),
        )
    )


def _diff_stat(store: WorkspaceStore, project_id: str) -> str | None:
    """``git diff --shortstat`` of the project's work so far; None when there is no workspace."""
    bare = store.read(project_id)
    if not bare.exists():
        return None
    try:
        root = workspace.root_commit(bare)
        return git(bare, "diff", "--shortstat", root, "main").strip() or "no changes"
    except GitError:
        log.info("no diff stats for project %s", project_id, exc_info=True)
        return None
