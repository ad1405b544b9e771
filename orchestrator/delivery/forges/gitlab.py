"""GitLab's REST API (v4): merge requests and their notes (a project or personal access token with
the ``api`` scope; ``write_repository`` alone pushes but cannot open a merge request).

A merge request is a draft while its title starts with ``Draft:``: rewriting the title without it
marks it ready."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from orchestrator.delivery.forges.base import PullRequest, RestClient

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
