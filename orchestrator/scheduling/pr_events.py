"""What a forge says about a pull request, as the feedback loop reads it: one typed event per
kind (a failed check, a review, a merge, a close), the same from a webhook and from the poller.

Every text in them came from outside (rule 11): a check's log tail and a comment's body are kept
as given here, and cut and quoted where they reach a prompt (``orchestrator.scheduling.rounds``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

LOG_TAIL_CHARS = 8000
COMMENT_CHARS = 4000
MAX_COMMENTS = 50


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CheckFailed(_Event):
    """A required check failed on the pull request's head: a GitHub check run or commit status,
    or a GitLab pipeline job."""

    kind: Literal["check_failed"] = "check_failed"
    #: The check's name (``test``, ``ci/build``) and the forge's id of this run of it: one round
    #: per failed run, however often it is reported.
    name: str = Field(max_length=300)
    run_id: str = Field(max_length=200)
    head_sha: str | None = Field(default=None, max_length=64)
    #: The end of the failing job's log, as the forge gave it (cut to LOG_TAIL_CHARS).
    log_tail: str = ""
    url: str | None = Field(default=None, max_length=2000)


class ReviewComment(BaseModel):
    """One comment of a review: on a line of a file, or on the whole pull request (no path)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(max_length=200)
    path: str | None = Field(default=None, max_length=1000)
    line: int | None = None
    body: str
    author: str | None = Field(default=None, max_length=200)


class ReviewSubmitted(_Event):
    """A review asking for changes, or leaving comments (an approval alone starts no round)."""

    kind: Literal["review"] = "review"
    review_id: str = Field(max_length=200)
    state: Literal["changes_requested", "commented", "approved"]
    body: str = ""
    author: str | None = Field(default=None, max_length=200)
    comments: list[ReviewComment] = Field(default_factory=list)


class Merged(_Event):
    kind: Literal["merged"] = "merged"
    merge_sha: str | None = Field(default=None, max_length=64)


class Closed(_Event):
    """Closed without merging."""

    kind: Literal["closed"] = "closed"


#: What a forge says about a pull request, as the loop reads it.
PrEvent = Annotated[CheckFailed | ReviewSubmitted | Merged | Closed, Field(discriminator="kind")]
