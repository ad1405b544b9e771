"""GitHub's REST API: pulls and issue comments (a fine-grained token with "Pull requests: write"
and "Contents: write" on the repository, or a classic token with ``repo``).

REST cannot turn a draft into a pull request ready for review (only GraphQL's
``markPullRequestReadyForReview`` can): a draft stays one, and the delivery says so in its comment.

The feedback loop's poller reads (each with ``If-None-Match``): the pull request (its state and
head), the head's check runs (a failed GitHub Actions run's job log, else the run's output) and
commit statuses (the newest of each context), the reviews and, when they changed, the review
comments; replies go to a review comment's thread. Every failed check counts as required: REST
tells which are required only to a token that may read branch protection.
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

import httpx

from orchestrator.delivery.forges.base import PollState, PullRequest, RestClient, own, tail
from orchestrator.scheduling.pr_events import (
    CheckFailed,
    Closed,
    Merged,
    PrEvent,
    ReviewComment,
    ReviewSubmitted,
)
from shared.errors import ForgeError

FAILED_CHECKS = ("failure", "timed_out", "action_required")
FAILED_STATUSES = ("failure", "error")
REVIEW_STATES: dict[str, Literal["changes_requested", "commented", "approved"]] = {
    "CHANGES_REQUESTED": "changes_requested",
    "COMMENTED": "commented",
    "APPROVED": "approved",
}


def _pull_request(data: dict[str, Any]) -> PullRequest:
    return PullRequest(number=int(data["number"]), url=str(data["html_url"]), draft=bool(data.get("draft")))


class GitHub:
    def __init__(
        self, api_url: str, repo_path: str, token: str, transport: httpx.BaseTransport | None = None
    ) -> None:
        self._owner = repo_path.split("/", 1)[0]
        self._repo = f"/repos/{repo_path}"
        headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
        }
        self._rest = RestClient(api_url, headers, transport)

    def close(self) -> None:
        self._rest.close()

    def find_pull_request(self, head: str, base: str | None) -> PullRequest | None:
        params = {"head": f"{self._owner}:{head}", "state": "open"}
        if base:
            params["base"] = base
        found = self._rest.request("GET", f"{self._repo}/pulls", params=params) or []
        return _pull_request(found[0]) if found else None

    def open_pull_request(self, head: str, base: str, title: str, body: str, *, draft: bool) -> PullRequest:
        data = {"title": title, "head": head, "base": base, "body": body, "draft": draft}
        return _pull_request(self._rest.request("POST", f"{self._repo}/pulls", json=data))

    def update_pull_request(
        self, pull_request: PullRequest, title: str, body: str, *, draft: bool
    ) -> PullRequest:
        del draft  # REST's PATCH ignores it (see the module's docstring); the answer shows what stays
        data = self._rest.request(
            "PATCH", f"{self._repo}/pulls/{pull_request.number}", json={"title": title, "body": body}
        )
        return _pull_request(data) if data else pull_request

    def comment_bodies(self, pull_request: PullRequest) -> list[str]:
        path = f"{self._repo}/issues/{pull_request.number}/comments"
        found = self._rest.request("GET", path, params={"per_page": 100}) or []
        return [str(c.get("body") or "") for c in found]

    def comment(self, pull_request: PullRequest, body: str) -> None:
        self._rest.request("POST", f"{self._repo}/issues/{pull_request.number}/comments", json={"body": body})

    # -- the feedback loop ---------------------------------------------------------------------

    def poll(self, number: int, state: PollState, *, reviews: bool) -> list[PrEvent]:
        etags: dict[str, str] = {}
        pull = self._rest.get_if_changed(f"{self._repo}/pulls/{number}", state, etags)
        if pull is not None:
            if pull.get("merged"):
                return [Merged(merge_sha=pull.get("merge_commit_sha"))]
            if pull.get("state") == "closed":
                return [Closed()]
            state.head = (pull.get("head") or {}).get("sha") or state.head
        found: list[PrEvent] = []
        if state.head:
            found += self._failed_checks(state, etags)
        if reviews:
            found += self._reviews(number, state, etags)
        state.etags = etags
        return found

    def _failed_checks(self, state: PollState, etags: dict[str, str]) -> list[CheckFailed]:
        found: list[CheckFailed] = []
        runs = self._rest.get_if_changed(f"{self._repo}/commits/{state.head}/check-runs", state, etags)
        for run in (runs or {}).get("check_runs", []):
            if run.get("conclusion") in FAILED_CHECKS:
                found.append(self._check(run, state))
        statuses = self._rest.get_if_changed(f"{self._repo}/commits/{state.head}/statuses", state, etags)
        newest: dict[str, dict[str, Any]] = {}
        for status in statuses or []:  # newest first
            newest.setdefault(str(status.get("context")), status)
        for context, status in newest.items():
            if status.get("state") in FAILED_STATUSES:
                found.append(
                    CheckFailed(
                        name=context[:300],
                        run_id=f"status:{status['id']}",
                        head_sha=state.head,
                        log_tail=tail(str(status.get("description") or "")),
                        url=status.get("target_url"),
                    )
                )
        return found

    def _check(self, run: dict[str, Any], state: PollState) -> CheckFailed:
        key = f"check:{run['id']}"
        output = run.get("output") or {}
        log = "\n".join(str(output.get(k) or "") for k in ("title", "summary", "text")).strip()
        if key not in state.seen and (run.get("app") or {}).get("slug") == "github-actions":
            # the job's log (a redirect to where it is stored); the run's output when it is gone
            with contextlib.suppress(ForgeError):
                log = self._rest.get_text(f"{self._repo}/actions/jobs/{run['id']}/logs")
        if key not in state.seen:
            state.seen.append(key)
        return CheckFailed(
            name=str(run.get("name"))[:300],
            run_id=str(run["id"]),
            head_sha=run.get("head_sha"),
            log_tail=tail(log),
            url=run.get("html_url"),
        )

    def _reviews(self, number: int, state: PollState, etags: dict[str, str]) -> list[ReviewSubmitted]:
        listed = self._rest.get_if_changed(f"{self._repo}/pulls/{number}/reviews", state, etags)
        if listed is None:
            return []
        comments = self._review_comments(number)
        found = []
        for review in listed:
            kind = REVIEW_STATES.get(str(review.get("state")))
            if kind is None or own(review.get("body")):
                continue
            mine = [
                ReviewComment(
                    id=str(c.get("in_reply_to_id") or c["id"]),  # a reply goes to its thread's first comment
                    path=c.get("path"),
                    line=c.get("line") or c.get("original_line"),
                    body=str(c.get("body") or ""),
                    author=(c.get("user") or {}).get("login"),
                )
                for c in comments
                if c.get("pull_request_review_id") == review["id"] and not own(c.get("body"))
            ]
            if not mine and not review.get("body") and kind != "changes_requested":
                continue  # a thread's reply of ours, or an empty approval
            found.append(
                ReviewSubmitted(
                    review_id=str(review["id"]),
                    state=kind,
                    body=str(review.get("body") or ""),
                    author=(review.get("user") or {}).get("login"),
                    comments=mine,
                )
            )
        return found

    def own_replies(self, number: int) -> list[str]:
        return [
            str(c.get("body"))
            for c in self._review_comments(number)
            if c.get("in_reply_to_id") and own(c.get("body"))
        ]

    def _review_comments(self, number: int) -> list[dict[str, Any]]:
        path = f"{self._repo}/pulls/{number}/comments"
        return list(self._rest.request("GET", path, params={"per_page": 100}) or [])

    def reply(self, number: int, comment_id: str, body: str) -> None:
        path = f"{self._repo}/pulls/{number}/comments/{comment_id}/replies"
        self._rest.request("POST", path, json={"body": body})
