"""After a pull request round's work is pushed: a reply to each review comment the round addressed.

The delivery that pushes a finished round's commits (its next round, ``run.deliver``) calls
:func:`reply_to_comments` once the pull request is updated. Each comment of the round's review
gets one reply in its thread (GitHub) or its discussion (GitLab), naming the round, the commit
and what the round cost; a reply is looked up on the forge (our marker) before it is posted, and
the round records what it replied to (``pr_rounds.replied``), so a retried delivery or a restart
never replies twice. A round its budget ended (``shared.rounds.cap_open_round``) addressed
nothing and replies nothing.
"""

from __future__ import annotations

import logging
from decimal import Decimal

from sqlalchemy import select

from orchestrator.delivery.forges.base import OWN_MARKER, Forge
from orchestrator.scheduling.pr_events import ReviewSubmitted
from shared.db import session_scope
from shared.models import Project, PrRound

log = logging.getLogger(__name__)


def reply_marker(round_id: str, comment_id: str) -> str:
    return f"{OWN_MARKER}reply round={round_id} comment={comment_id} -->"


def _unreplied(project_id: str) -> tuple[list[tuple[str, int, str, list[str]]], str | None]:
    """The project's finished rounds not replied yet, (id, number, cost, comment ids) each, and
    the workspace's commit (what was pushed)."""
    with session_scope() as session:
        rows = session.scalars(
            select(PrRound).where(
                PrRound.project_id == project_id, PrRound.finished_at.is_not(None), PrRound.replied.is_(None)
            )
        ).all()
        project = session.get_one(Project, project_id)
        found = []
        for row in rows:
            event = row.feedback.get("event") or {}
            ids = []
            if event.get("kind") == "review":
                ids = list(dict.fromkeys(c.id for c in ReviewSubmitted.model_validate(event).comments))
            cost = row.feedback.get("cost_usd") or project.spent_usd - row.spent_at_start_usd
            found.append((row.id, row.number, f"{Decimal(cost):.4f}", ids))
        return found, project.workspace_sha


def reply_to_comments(forge: Forge, project_id: str, number: int) -> int:
    """Reply once to each comment of the project's finished rounds; how many replies were posted.

    Raises:
        ForgeError: the forge refused (the delivery reports it and is tried again; what was
            replied before stays replied).
    """
    rounds, sha = _unreplied(project_id)
    if not rounds:
        return 0
    posted_before = "\n".join(forge.own_replies(number)) if any(ids for *_, ids in rounds) else ""
    posted = 0
    for round_id, round_number, cost, ids in rounds:
        for comment_id in ids:
            if reply_marker(round_id, comment_id) in posted_before:
                continue
            commit = f" in commit {sha[:12]}" if sha else ""
            body = (
                f"Addressed in pull request round {round_number}{commit} (the round cost ${cost}).\n\n"
                f"{reply_marker(round_id, comment_id)}"
            )
            forge.reply(number, comment_id, body)
            posted += 1
        with session_scope() as session:
            session.get_one(PrRound, round_id).replied = ids
    log.info("project %s: %d replies on pull request %d", project_id, posted, number)
    return posted
