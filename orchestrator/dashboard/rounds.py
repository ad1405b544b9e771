"""A project's pull request rounds (issue #25's ``[delivery] follow``), as a page: the pull
request followed and its state, then each round — its number, what caused it (a failed check, a
review asking for changes), whether it is still going, and what it cost.

A round's cost is what the project spent from its start to the next round's (the last round: to
now); a delivered project spends nothing between rounds, so it is the round's own iterations.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from fastapi import APIRouter
from fastapi.responses import HTMLResponse
from pydantic import BaseModel
from sqlalchemy import select

from orchestrator.dashboard.render import render
from orchestrator.dashboard.views import ProjectSigned, as_page
from orchestrator.scheduling.lookup import get_project_row
from shared.db import session_scope
from shared.models import FollowStatus, PrFollow, PrRound

router = APIRouter(include_in_schema=False)
CAUSE_CHARS = 300


class RoundRow(BaseModel):
    number: int
    cause: str
    url: str | None
    open: bool
    cost_usd: Decimal
    started_at: datetime
    finished_at: datetime | None


class FollowView(BaseModel):
    repo: str
    pr_number: int
    status: FollowStatus
    end_reason: str | None
    rounds: list[RoundRow]


def _cause(feedback: dict[str, Any]) -> tuple[str, str | None]:
    """What started a round, in one line (the forge's words cut: data, never instructions)."""
    event = feedback.get("event") or {}
    if event.get("kind") == "check_failed":
        return f"check {event.get('name', '?')} failed (run {event.get('run_id', '?')})", event.get("url")
    if event.get("kind") == "review":
        who = event.get("author") or "someone"
        body = " ".join(str(event.get("body") or "").split())
        said = f": {body[:CAUSE_CHARS]}{'…' if len(body) > CAUSE_CHARS else ''}" if body else ""
        state = str(event.get("state", "review")).replace("_", " ")
        return f"review by {who} ({state}, {len(event.get('comments') or [])} comments){said}", None
    return str(event.get("kind") or "unknown"), None


def pr_rounds(project_id: str) -> FollowView | None:
    """The project's followed pull request and its rounds, oldest first; None if it follows none.

    Raises:
        NotFound: no such project.
    """
    with session_scope() as session:
        project = get_project_row(session, project_id)
        follow = session.scalars(select(PrFollow).where(PrFollow.project_id == project_id)).first()
        if follow is None:
            return None
        found = session.scalars(
            select(PrRound).where(PrRound.follow_id == follow.id).order_by(PrRound.number)
        ).all()
        ends = [r.spent_at_start_usd for r in found[1:]] + [project.spent_usd]
        rows = []
        for row, spent_by_end in zip(found, ends, strict=True):
            cause, url = _cause(row.feedback)
            rows.append(
                RoundRow(
                    number=row.number,
                    cause=cause,
                    url=url if url and url.startswith(("http://", "https://")) else None,
                    open=row.finished_at is None,
                    cost_usd=max(Decimal(0), spent_by_end - row.spent_at_start_usd),
                    started_at=row.created_at,
                    finished_at=row.finished_at,
                )
            )
        return FollowView(
            repo=follow.repo,
            pr_number=follow.pr_number,
            status=follow.status,
            end_reason=follow.end_reason,
            rounds=rows,
        )


@router.get("/projects/{project_id}/rounds")
def rounds_page(project_id: str, session: ProjectSigned) -> HTMLResponse:
    with as_page():
        follow = pr_rounds(project_id)
    return HTMLResponse(render("rounds.html", session=session, project_id=project_id, follow=follow))
