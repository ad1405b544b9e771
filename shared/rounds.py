"""What a pull request round tells the builder, and how a round ends.

The coordinator writes a round (orchestrator.scheduling.rounds: the failed check's log tail and the
review's comments, cut and quoted as untrusted data, and the budget limit it runs under); the claim
of the builder's next iteration reads it here, so it reaches every harness in the first message.
:func:`finish_open_round` is how a round ends when the builder completed again: its work is
delivered to the same branch, the project's own budget limit given back. :func:`cap_open_round`
is how it ends when its budget ran out (the ledger refused the next call): the follow ends, the
project is ``delivered`` and its delivery's one comment says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.event_payloads import FollowEnded, ProjectDelivered, RoundFinished, RoundStarted
from shared.models import FollowStatus, PrFollow, Project, ProjectStatus, PrRound, utcnow
from shared.project_config import ProjectConfig

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@dataclass(frozen=True)
class FinishedRound:
    number: int
    #: What the round spent (the project's spending from its start to its end).
    cost_usd: Decimal
    #: The project's status reason once delivered again (following_line).
    following: str


def following_line(pr_number: int, rounds: int, max_rounds: int, last_cost_usd: Decimal | None = None) -> str:
    """What ``raas status`` (and the pull request's round comment) says of a followed pull request
    between rounds, with what the last round cost."""
    cost = f", the last cost ${last_cost_usd:.4f}" if last_cost_usd is not None else ""
    return f"Following pull request #{pr_number}: {rounds} of {max_rounds} rounds had{cost}"


def describe(data: object) -> str | None:
    """The line ``raas follow`` prints for an event of the feedback loop; None for any other."""
    if isinstance(data, ProjectDelivered):
        return f"pull request #{data.pull_request} open{', followed' if data.following else ''}: {data.url}"
    if isinstance(data, RoundStarted):  # the summary came from the forge: no control characters
        summary = _CONTROL.sub("?", data.summary)
        return f"round {data.round} of {data.max_rounds} ({data.trigger.replace('_', ' ')}): {summary}"
    if isinstance(data, RoundFinished):
        cost = f", cost ${data.cost_usd:.4f}" if data.cost_usd is not None else ""
        return f"round {data.round} done{cost}" + (f", pushed {data.sha[:12]}" if data.sha else "")
    if isinstance(data, FollowEnded):
        return f"no longer following the pull request ({data.reason}): {_CONTROL.sub('?', data.detail)}"
    return None


def _open_round(session: Session, project_id: str) -> PrRound | None:
    return session.scalars(
        select(PrRound)
        .where(PrRound.project_id == project_id, PrRound.finished_at.is_(None))
        .order_by(PrRound.number.desc())
    ).first()


def feedback_for(session: Session, project_id: str) -> str | None:
    """The open round's text for the agent, or None when no round is open."""
    row = _open_round(session, project_id)
    if row is None:
        return None
    text = row.feedback.get("prompt")
    return str(text) if text else None


def finish_open_round(session: Session, project_id: str) -> FinishedRound | None:
    """End the project's open round (its follow watches again, the project's budget limit is its
    own again); what it was, or None if none was open."""
    row = _open_round(session, project_id)
    if row is None:
        return None
    row.finished_at = utcnow()
    project = session.get_one(Project, project_id)
    lowered, before = row.feedback.get("limit_usd"), row.feedback.get("limit_before_usd")
    if lowered is not None and before is not None and project.budget_limit_usd == Decimal(lowered):
        project.budget_limit_usd = Decimal(before)  # unless someone set another limit meanwhile
    follow = session.get_one(PrFollow, row.follow_id)
    if follow.status == FollowStatus.IN_ROUND:
        follow.status = FollowStatus.WATCHING
    cost = project.spent_usd - row.spent_at_start_usd
    row.feedback = {**row.feedback, "cost_usd": str(cost)}  # the replies and receipts say it
    max_rounds = ProjectConfig.model_validate(project.config).delivery.max_rounds
    return FinishedRound(row.number, cost, following_line(follow.pr_number, row.number, max_rounds, cost))


def cap_open_round(session: Session, project: Project) -> list[RoundFinished | FollowEnded]:
    """The project's budget ran out during a round: the round and the follow end, the project is
    ``delivered`` with the reason as its status reason (its delivery's comment says it). The events
    to record; none when no round is open (an ordinary budget pause)."""
    finished = finish_open_round(session, project.id)
    if finished is None:
        return []
    follow = session.scalars(select(PrFollow).where(PrFollow.project_id == project.id)).one()
    row = session.scalars(
        select(PrRound).where(PrRound.follow_id == follow.id, PrRound.number == finished.number)
    ).one()
    row.replied = []  # its comments were not addressed: no replies
    delivery = ProjectConfig.model_validate(project.config).delivery
    spent = project.spent_usd - follow.spent_at_start_usd
    detail = (
        f"Stopped following this pull request: round {finished.number} ran out of budget after spending "
        f"${finished.cost_usd:.4f} (all rounds: ${spent:.4f}; [delivery] round_budget_usd = "
        f"{delivery.round_budget_usd or 'none'}, pr_budget_usd = {delivery.pr_budget_usd or 'none'}, "
        f"the project's limit ${project.budget_limit_usd:.2f}); what it did so far is on this branch"
    )
    follow.status, follow.end_reason, follow.ended_at = FollowStatus.ENDED, detail, utcnow()
    project.status, project.status_reason, project.pause_reason = ProjectStatus.DELIVERED, detail, None
    project.finished_at = utcnow()
    return [
        RoundFinished(round=finished.number, cost_usd=finished.cost_usd),
        FollowEnded(reason="budget", detail=detail),
    ]
