"""The pull-request feedback loop's way in: what a forge says about a pull request the service
opened (DESIGN.md rule 13).

Two sources call :func:`note_pr_event` with the same typed :data:`PrEvent`: a forge webhook a
trigger receives (its signature checked before parsing), and the poller that watches a delivered
project's pull request when no trigger for the repository exists. Either way the event is decided
in the caller's transaction (``out``): a round is a row written there, and its iteration leaves
through the outbox after the commit, so a redelivered webhook or a second poll starts nothing twice.

What arrives from the forge is untrusted (rule 11): a check's log tail and a review comment reach
the agent as quoted data, size-capped, never as instructions.
"""

from __future__ import annotations

from orchestrator.scheduling.lookup import get_project_row
from orchestrator.scheduling.outbox import Outbox
from orchestrator.scheduling.pr_events import (
    CheckFailed,
    Closed,
    Merged,
    PrEvent,
    ReviewComment,
    ReviewSubmitted,
)
from orchestrator.scheduling.rounds import follower, take_event
from shared.errors import NotFound

__all__ = [
    "CheckFailed",
    "Closed",
    "Merged",
    "PrEvent",
    "ReviewComment",
    "ReviewSubmitted",
    "note_pr_event",
    "report_pr_event",
]


def note_pr_event(out: Outbox, *, repo: str, pr_number: int, event: PrEvent) -> bool:
    """Take a forge's event on pull request ``pr_number`` of ``repo`` (``owner/name``, or
    ``group/sub/name`` on GitLab, as the forge spells it; compared without case).

    Returns:
        True when a delivered project follows that pull request and took the event (a round
        decided, or the follow ended by a merge or a close; a repeat of an event already taken is
        taken again, and changes nothing). False when no project of the service follows it: a
        pull request the service did not open, or one whose follow has ended. Nothing is written
        then.
    """
    return take_event(out, repo=repo, pr_number=pr_number, event=event)


def report_pr_event(out: Outbox, tenant_id: str | None, *, repo: str, pr_number: int, event: PrEvent) -> str:
    """A person's or a CI system's report of an event on a pull request (``raas feedback``, the API):
    taken as a forge's would be, for a project of ``tenant_id`` (None: the cluster, any project).
    Returns the id of the project that follows it.

    Raises:
        NotFound: no project of the tenant follows that pull request (one the service did not
            open, or whose follow ended); nothing is written.
    """
    follow = follower(out.session, repo, pr_number)
    owner = get_project_row(out.session, follow.project_id).tenant_id if follow is not None else None
    if follow is None or (tenant_id is not None and owner != tenant_id):
        msg = (
            f"no project of yours follows {repo}#{pr_number}: this service did not open that pull request, "
            "or its follow has ended (merged, closed or capped); nothing was changed"
        )
        raise NotFound(msg)
    take_event(out, repo=repo, pr_number=pr_number, event=event)
    return follow.project_id
