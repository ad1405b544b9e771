"""A fake forge on loopback: the GitHub and GitLab REST endpoints the delivery uses, and nothing else.

It is the one fake of the delivery tests (as the scripted model is for Claude): pull requests
(GitHub) and merge requests (GitLab) with their comments live in memory, every request is
recorded, and a test can make the next requests fail (a 401, a 422 with GitHub's error list, a
rate limit with Retry-After) or hold one until it lets it go (to kill a coordinator mid-delivery).

    with serve_forge(token="tok") as forge:
        config = {"forge": "github", "api_url": forge.url}
        ...
        assert len(forge.pulls("alice/app")) == 1
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support.loopback import QuietHandler, serve_loopback


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    query: dict[str, str]
    body: Any
    status: int
    auth: str  # the Authorization or PRIVATE-TOKEN header as sent


@dataclass
class Failure:
    method: str
    path_pattern: str
    status: int
    body: dict[str, Any]
    headers: dict[str, str]
    times: int


@dataclass
class FakeForge:
    token: str
    url: str = ""
    calls: list[Call] = field(default_factory=list)
    # (repo path) -> pull requests as the forge shows them; (repo, number) -> comment bodies
    _pulls: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _comments: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    _failures: list[Failure] = field(default_factory=list)
    _holds: dict[str, threading.Event] = field(default_factory=dict)
    held: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- what a test arranges ---------------------------------------------------------------

    def fail(
        self,
        method: str,
        path_pattern: str,
        status: int,
        body: dict[str, Any],
        *,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests matching with ``status`` and ``body``."""
        self._failures.append(Failure(method, path_pattern, status, body, headers or {}, times))

    def hold(self, method: str, path_pattern: str, *, answered: bool = False) -> threading.Event:
        """Keep the next matching request waiting (``held`` is set when it arrives) until the
        returned event is set; ``answered``: wait after acting on it, before the answer goes out."""
        release = threading.Event()
        self._holds[f"{method} {path_pattern} {'after' if answered else 'before'}"] = release
        return release

    def _wait_if_held(self, method: str, path: str, when: str) -> None:
        for key, release in list(self._holds.items()):
            hold_method, pattern, hold_when = key.split(" ")
            if hold_method == method and hold_when == when and re.search(pattern, path):
                del self._holds[key]
                self.held.set()
                release.wait(60)

    # -- what a test reads ------------------------------------------------------------------

    def pulls(self, repo: str) -> list[dict[str, Any]]:
        return list(self._pulls.get(repo, []))

    def comments(self, repo: str, number: int) -> list[str]:
        return list(self._comments.get((repo, number), []))

    def requests(self, method: str | None = None) -> list[Call]:
        return [c for c in self.calls if method is None or c.method == method]

    # -- the endpoints ----------------------------------------------------------------------

    def answer(
        self, method: str, path: str, query: dict[str, str], body: Any, auth: str
    ) -> tuple[int, Any, dict[str, str]]:
        self._wait_if_held(method, path, "before")
        answer = self._answer(method, path, query, body, auth)
        self._wait_if_held(method, path, "after")
        return answer

    def _answer(
        self, method: str, path: str, query: dict[str, str], body: Any, auth: str
    ) -> tuple[int, Any, dict[str, str]]:
        for failure in self._failures:
            if failure.times > 0 and failure.method == method and re.search(failure.path_pattern, path):
                failure.times -= 1
                return failure.status, failure.body, failure.headers
        github = path.startswith("/repos/")
        if auth not in (f"Bearer {self.token}", self.token):
            return 401, {"message": "Bad credentials" if github else "401 Unauthorized"}, {}
        with self._lock:
            return (
                self._github(method, path, query, body) if github else self._gitlab(method, path, query, body)
            )

    def _github(
        self, method: str, path: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any, dict[str, str]]:
        match = re.fullmatch(r"/repos/([^/]+/[^/]+)/(pulls|issues)(?:/(\d+))?(/comments)?", path)
        if match is None:
            return 404, {"message": "Not Found"}, {}
        repo, kind, number, comments = match[1], match[2], match[3], match[4]
        pulls = self._pulls.setdefault(repo, [])
        if kind == "pulls" and number is None and method == "GET":
            owner, _, head = query.get("head", "").partition(":")
            found = [
                p for p in pulls
                if p["state"] == "open"
                and (not head or (p["head"]["ref"] == head and owner == repo.split("/")[0]))
                and ("base" not in query or p["base"]["ref"] == query["base"])
            ]  # fmt: skip
            return 200, found, {}
        if kind == "pulls" and number is None and method == "POST":
            if any(p["state"] == "open" and p["head"]["ref"] == body["head"] for p in pulls):
                message = f"A pull request already exists for {repo.split('/')[0]}:{body['head']}."
                return 422, {"message": "Validation Failed", "errors": [{"message": message}]}, {}
            number_ = len(pulls) + 1
            pull = {
                "number": number_,
                "html_url": f"{self.url}/{repo}/pull/{number_}",
                "state": "open",
                "draft": bool(body.get("draft")),
                "title": body["title"],
                "body": body["body"],
                "head": {"ref": body["head"]},
                "base": {"ref": body["base"]},
            }
            pulls.append(pull)
            return 201, pull, {}
        if kind == "pulls" and number is not None and method == "PATCH":
            pull = next(p for p in pulls if p["number"] == int(number))
            pull.update({k: v for k, v in body.items() if k in ("title", "body")})
            return 200, pull, {}
        if kind == "issues" and comments and number is not None:
            bodies = self._comments.setdefault((repo, int(number)), [])
            if method == "POST":
                bodies.append(body["body"])
                return 201, {"id": len(bodies), "body": body["body"]}, {}
            return 200, [{"id": i + 1, "body": b} for i, b in enumerate(bodies)], {}
        return 404, {"message": "Not Found"}, {}

    def _gitlab(
        self, method: str, path: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any, dict[str, str]]:
        match = re.fullmatch(r"/api/v4/projects/([^/]+)/merge_requests(?:/(\d+))?(/notes)?", path)
        if match is None:
            return 404, {"message": "404 Not Found"}, {}
        repo, number, notes = unquote(match[1]), match[2], match[3]
        requests = self._pulls.setdefault(repo, [])
        if number is None and method == "GET":
            found = [
                r for r in requests
                if r["state"] == "opened" and r["source_branch"] == query.get("source_branch")
                and ("target_branch" not in query or r["target_branch"] == query["target_branch"])
            ]  # fmt: skip
            return 200, found, {}
        if number is None and method == "POST":
            if any(r["state"] == "opened" and r["source_branch"] == body["source_branch"] for r in requests):
                return (
                    409,
                    {"message": ["Another open merge request already exists for this source branch"]},
                    {},
                )
            iid = len(requests) + 1
            request = {
                "iid": iid,
                "web_url": f"{self.url}/{repo}/-/merge_requests/{iid}",
                "state": "opened",
                "draft": body["title"].startswith("Draft: "),
                "title": body["title"],
                "description": body["description"],
                "source_branch": body["source_branch"],
                "target_branch": body["target_branch"],
            }
            requests.append(request)
            return 201, request, {}
        if number is not None and notes is None and method == "PUT":
            request = next(r for r in requests if r["iid"] == int(number))
            request.update({k: v for k, v in body.items() if k in ("title", "description")})
            request["draft"] = request["title"].startswith("Draft: ")
            return 200, request, {}
        if number is not None and notes:
            bodies = self._comments.setdefault((repo, int(number)), [])
            if method == "POST":
                bodies.append(body["body"])
                return 201, {"id": len(bodies), "body": body["body"]}, {}
            return 200, [{"id": i + 1, "body": b} for i, b in enumerate(bodies)], {}
        return 404, {"message": "404 Not Found"}, {}


def _handler(forge: FakeForge) -> type[BaseHTTPRequestHandler]:
    class Handler(QuietHandler):  # the requests are recorded in ``forge.calls``
        def do_PATCH(self) -> None:
            self._serve()

        def do_PUT(self) -> None:
            self._serve()

        def _serve(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw) if raw else None
            auth = self.headers.get("Authorization") or self.headers.get("PRIVATE-TOKEN") or ""
            status, answer, headers = forge.answer(self.command, parts.path, query, body, auth)
            forge.calls.append(Call(self.command, parts.path, query, body, status, auth))
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            with contextlib.suppress(BrokenPipeError):  # a client killed while its request was held
                self.wfile.write(data)

    return Handler


@contextmanager
def serve_forge(token: str) -> Iterator[FakeForge]:
    forge = FakeForge(token=token)
    with serve_loopback(_handler(forge), "fake-forge") as url:
        forge.url = url
        try:
            yield forge
        finally:
            for release in forge._holds.values():  # held requests answer before the server stops
                release.set()
