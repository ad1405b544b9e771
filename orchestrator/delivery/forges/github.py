"""GitHub's REST API: pulls and issue comments (a fine-grained token with "Pull requests: write"
and "Contents: write" on the repository, or a classic token with ``repo``).

REST cannot turn a draft into a pull request ready for review (only GraphQL's
``markPullRequestReadyForReview`` can): a draft stays one, and the delivery says so in its comment.
"""

from __future__ import annotations

from typing import Any

import httpx

from orchestrator.delivery.forges.base import PullRequest, RestClient


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
