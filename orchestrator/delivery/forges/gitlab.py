"""GitLab's REST API (v4): merge requests and their notes (a project or personal access token with
the ``api`` scope; ``write_repository`` alone pushes but cannot open a merge request).

A merge request is a draft while its title starts with ``Draft:``: rewriting the title without it
marks it ready.

The feedback loop's poller reads (each with ``If-None-Match``): the merge request (its state and
head), its pipelines (the head's failed one: its failed jobs and their traces) and its discussions
(notes newer than the last read, not the system's or ours); replies go to the note's discussion.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

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

DRAFT_PREFIX = "Draft: "


def _merge_request(data: dict[str, Any]) -> PullRequest:
    return PullRequest(number=int(data["iid"]), url=str(data["web_url"]), draft=bool(data.get("draft")))


class GitLab:
    def __init__(
        self, api_url: str, repo_path: str, token: str, transport: httpx.BaseTransport | None = None
    ) -> None:
        self._project = f"/projects/{quote(repo_path, safe='')}"
        self._rest = RestClient(api_url, {"PRIVATE-TOKEN": token}, transport)

    def close(self) -> None:
        self._rest.close()

    def find_pull_request(self, head: str, base: str | None) -> PullRequest | None:
        params = {"source_branch": head, "state": "opened"}
        if base:
            params["target_branch"] = base
        found = self._rest.request("GET", f"{self._project}/merge_requests", params=params) or []
        return _merge_request(found[0]) if found else None

    def open_pull_request(self, head: str, base: str, title: str, body: str, *, draft: bool) -> PullRequest:
        data = {
            "source_branch": head,
            "target_branch": base,
            "title": f"{DRAFT_PREFIX}{title}" if draft else title,
            "description": body,
        }
        return _merge_request(self._rest.request("POST", f"{self._project}/merge_requests", json=data))

    def update_pull_request(
        self, pull_request: PullRequest, title: str, body: str, *, draft: bool
    ) -> PullRequest:
        title = f"{DRAFT_PREFIX}{title}" if draft else title
        path = f"{self._project}/merge_requests/{pull_request.number}"
        data = self._rest.request("PUT", path, json={"title": title, "description": body})
        return _merge_request(data) if data else pull_request

    def comment_bodies(self, pull_request: PullRequest) -> list[str]:
        path = f"{self._project}/merge_requests/{pull_request.number}/notes"
        found = self._rest.request("GET", path, params={"per_page": 100}) or []
        return [str(n.get("body") or "") for n in found]

    def comment(self, pull_request: PullRequest, body: str) -> None:
        path = f"{self._project}/merge_requests/{pull_request.number}/notes"
        self._rest.request("POST", path, json={"body": body})

    # -- the feedback loop ---------------------------------------------------------------------

    def poll(self, number: int, state: PollState, *, reviews: bool) -> list[PrEvent]:
        etags: dict[str, str] = {}
        path = f"{self._project}/merge_requests/{number}"
        request = self._rest.get_if_changed(path, state, etags)
        if request is not None:
            if request.get("state") == "merged":
                return [Merged(merge_sha=request.get("merge_commit_sha"))]
            if request.get("state") == "closed":
                return [Closed()]
            state.head = request.get("sha") or state.head
        found: list[PrEvent] = []
        pipelines = self._rest.get_if_changed(f"{path}/pipelines", state, etags)
        head = next((p for p in pipelines or [] if p.get("sha") == state.head), None)  # newest first
        if head is not None and head.get("status") == "failed":
            found += self._failed_jobs(head, state)
        if reviews:
            found += self._notes(path, state, etags)
        state.etags = etags
        return found

    def _failed_jobs(self, pipeline: dict[str, Any], state: PollState) -> list[CheckFailed]:
        jobs = self._rest.request(
            "GET", f"{self._project}/pipelines/{pipeline['id']}/jobs", params={"scope[]": "failed"}
        )
        found = []
        for job in jobs or []:
            if job.get("status") != "failed":
                continue
            key, log = f"job:{job['id']}", ""
            if key not in state.seen:
                state.seen.append(key)
                try:
                    log = self._rest.get_text(f"{self._project}/jobs/{job['id']}/trace")
                except ForgeError:
                    log = ""
            found.append(
                CheckFailed(
                    name=str(job.get("name"))[:300],
                    run_id=str(job["id"]),
                    head_sha=pipeline.get("sha"),
                    log_tail=tail(log),
                    url=pipeline.get("web_url"),
                )
            )
        return found

    def _notes(self, path: str, state: PollState, etags: dict[str, str]) -> list[ReviewSubmitted]:
        discussions = self._rest.get_if_changed(f"{path}/discussions", state, etags, params={"per_page": 100})
        if discussions is None:
            return []
        comments, newest = [], state.notes_after
        for discussion in discussions:
            for note in discussion.get("notes") or []:
                newest = max(newest, int(note["id"]))
                if int(note["id"]) <= state.notes_after or note.get("system") or own(note.get("body")):
                    continue
                position = note.get("position") or {}
                comments.append(
                    ReviewComment(
                        id=str(discussion["id"]),
                        path=position.get("new_path"),
                        line=position.get("new_line"),
                        body=str(note.get("body") or ""),
                        author=(note.get("author") or {}).get("username"),
                    )
                )
        state.notes_after = newest
        if not comments:
            return []
        return [ReviewSubmitted(review_id=f"notes:{newest}", state="commented", comments=comments)]

    def own_replies(self, number: int) -> list[str]:
        path = f"{self._project}/merge_requests/{number}/discussions"
        discussions = self._rest.request("GET", path, params={"per_page": 100}) or []
        notes = [n for d in discussions for n in (d.get("notes") or [])[1:]]  # a discussion's replies
        return [str(n.get("body")) for n in notes if own(n.get("body"))]

    def reply(self, number: int, comment_id: str, body: str) -> None:
        path = f"{self._project}/merge_requests/{number}/discussions/{comment_id}/notes"
        self._rest.request("POST", path, json={"body": body})
