"""A fake forge on loopback: the GitHub and GitLab REST endpoints the delivery uses, and nothing else.

It is the one fake of the delivery tests (as the scripted model is for Claude): pull requests
(GitHub) and merge requests (GitLab) with their comments live in memory, every request is
recorded, and a test can make the next requests fail (a 401, a 422 with GitHub's error list, a
rate limit with Retry-After) or hold one until it lets it go (to kill a coordinator mid-delivery).

    with serve_forge(token="tok") as forge:
        config = {"forge": "github", "api_url": forge.url}
        ...
        assert len(forge.pulls("alice/app")) == 1

What the PR feedback loop's poller reads is here too (issue #25): a pull request's head and state,
GitHub's check runs (with their job's log), commit statuses, reviews and review comments (and
replies to them), GitLab's pipelines (their failed jobs and traces) and merge-request discussions.
Every JSON answer to a GET carries an ``ETag``; a request whose ``If-None-Match`` names the current
one is answered ``304 Not Modified`` with no body, as the forges do (and it counts nothing against
the rate limit there): ``forge.requests`` records the 304s.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
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

BOT = "raas-bot"  # who the service's token is, as the forge shows its comments


class Text(str):
    """An answer sent as plain text (a job's log), not JSON."""


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
    # The feedback the poller reads: GitHub's by (repo, sha) and (repo, number), GitLab's alike.
    _checks: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    _statuses: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    _reviews: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    _review_comments: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    _logs: dict[tuple[str, int], str] = field(default_factory=dict)
    _pipelines: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    _jobs: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    _discussions: dict[tuple[str, int], list[dict[str, Any]]] = field(default_factory=dict)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1001))
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

    def set_head(self, repo: str, number: int, sha: str) -> None:
        """The pull request's head is ``sha`` (the forge learns it from a push; here, from the test)."""
        pull = self._pull(repo, number)
        if "head" in pull:
            pull["head"]["sha"] = sha
        else:
            pull["sha"] = sha

    def merge(self, repo: str, number: int) -> None:
        pull = self._pull(repo, number)
        if "head" in pull:
            pull.update(state="closed", merged=True, merge_commit_sha="f" * 40)
        else:
            pull.update(state="merged", merge_commit_sha="f" * 40)

    def close(self, repo: str, number: int) -> None:
        self._pull(repo, number)["state"] = "closed"

    def fail_check(self, repo: str, sha: str, name: str, log: str) -> int:
        """A GitHub Actions check run of ``name`` on ``sha`` failed; its job's log is ``log``."""
        run_id = next(self._ids)
        run = {
            "id": run_id,
            "name": name,
            "head_sha": sha,
            "status": "completed",
            "conclusion": "failure",
            "html_url": f"{self.url}/{repo}/runs/{run_id}",
            "app": {"slug": "github-actions"},
            "output": {"title": f"{name} failed", "summary": "", "text": None},
        }
        with self._lock:
            self._checks.setdefault((repo, sha), []).append(run)
            self._logs[(repo, run_id)] = log
        return run_id

    def set_status(self, repo: str, sha: str, context: str, state: str, description: str = "") -> int:
        """A commit status (GitHub's older API): ``failure``, ``error``, ``pending``, ``success``."""
        status_id = next(self._ids)
        status = {"id": status_id, "context": context, "state": state, "description": description,
                  "target_url": f"{self.url}/{repo}/status/{status_id}"}  # fmt: skip
        with self._lock:
            self._statuses.setdefault((repo, sha), []).insert(0, status)  # newest first, as GitHub
        return status_id

    def review(
        self,
        repo: str,
        number: int,
        state: str,
        body: str = "",
        comments: list[tuple[str, int, str]] = (),  # type: ignore[assignment]
        author: str = "carol",
    ) -> tuple[int, list[int]]:
        """A GitHub review (``CHANGES_REQUESTED``, ``COMMENTED``, ``APPROVED``) with comments on
        (path, line): the review's id and its comments' ids."""
        review_id = next(self._ids)
        with self._lock:
            self._reviews.setdefault((repo, number), []).append(
                {"id": review_id, "state": state, "body": body, "user": {"login": author}}
            )
            ids = []
            for path, line, text in comments:
                ids.append(next(self._ids))
                self._review_comments.setdefault((repo, number), []).append(
                    {"id": ids[-1], "pull_request_review_id": review_id, "path": path, "line": line,
                     "body": text, "user": {"login": author}, "in_reply_to_id": None}
                )  # fmt: skip
        return review_id, ids

    def fail_pipeline(self, repo: str, iid: int, sha: str, job: str, log: str) -> int:
        """A GitLab pipeline of the merge request on ``sha`` failed in ``job`` with trace ``log``."""
        pipeline_id, job_id = next(self._ids), next(self._ids)
        with self._lock:
            self._pipelines.setdefault((repo, iid), []).insert(
                0,
                {"id": pipeline_id, "sha": sha, "status": "failed", "web_url": f"{self.url}/p/{pipeline_id}"},
            )
            self._jobs[(repo, pipeline_id)] = [{"id": job_id, "name": job, "status": "failed"}]
            self._logs[(repo, job_id)] = log
        return pipeline_id

    def discuss(
        self,
        repo: str,
        iid: int,
        body: str,
        path: str | None = None,
        line: int | None = None,
        author: str = "carol",
    ) -> str:
        """A GitLab merge-request discussion opened by ``author`` (on a line of a file, or not)."""
        discussion = f"d{next(self._ids)}"
        note: dict[str, Any] = {"id": next(self._ids), "body": body, "author": {"username": author},
                                "system": False, "resolved": False}  # fmt: skip
        if path is not None:
            note["type"] = "DiffNote"
            note["position"] = {"new_path": path, "new_line": line}
        with self._lock:
            self._discussions.setdefault((repo, iid), []).append(
                {"id": discussion, "individual_note": path is None, "notes": [note]}
            )
        return discussion

    def answer_in(self, repo: str, iid: int, discussion: str, body: str, author: str = "carol") -> int:
        """A person's note in an existing discussion of the merge request: its id."""
        note = {"id": next(self._ids), "body": body, "author": {"username": author}, "system": False}
        with self._lock:
            found = next(d for d in self._discussions[(repo, iid)] if d["id"] == discussion)
            found["notes"].append(note)
        return int(note["id"])

    def _pull(self, repo: str, number: int) -> dict[str, Any]:
        return next(p for p in self._pulls[repo] if p.get("number", p.get("iid")) == number)

    # -- what a test reads ------------------------------------------------------------------

    def pulls(self, repo: str) -> list[dict[str, Any]]:
        return list(self._pulls.get(repo, []))

    def comments(self, repo: str, number: int) -> list[str]:
        return list(self._comments.get((repo, number), []))

    def requests(self, method: str | None = None) -> list[Call]:
        return [c for c in self.calls if method is None or c.method == method]

    def replies(self, repo: str, number: int) -> dict[str, list[str]]:
        """The service's replies to review comments (GitHub) or in discussions (GitLab), by the
        comment's or the discussion's id."""
        found: dict[str, list[str]] = {}
        for comment in self._review_comments.get((repo, number), []):
            if comment["in_reply_to_id"] is not None and comment["user"]["login"] == BOT:
                found.setdefault(str(comment["in_reply_to_id"]), []).append(comment["body"])
        for discussion in self._discussions.get((repo, number), []):
            for note in discussion["notes"][1:]:
                if note["author"]["username"] == BOT:
                    found.setdefault(discussion["id"], []).append(note["body"])
        return found

    # -- the endpoints ----------------------------------------------------------------------

    def answer(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        body: Any,
        auth: str,
        if_none_match: str | None = None,
    ) -> tuple[int, Any, dict[str, str]]:
        """The forge's answer; a GET's JSON carries an ETag, and ``if_none_match`` naming it gets a 304."""
        self._wait_if_held(method, path, "before")
        status, answer, headers = self._answer(method, path, query, body, auth)
        if method == "GET" and status == 200 and not isinstance(answer, Text):
            etag = '"' + hashlib.sha1(json.dumps(answer, sort_keys=True).encode()).hexdigest() + '"'
            if if_none_match == etag:
                status, answer = 304, None
            headers = {**headers, "ETag": etag}
        self._wait_if_held(method, path, "after")
        return status, answer, headers

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
            fed = (
                self._github_feedback(method, path, body)
                if github
                else self._gitlab_feedback(method, path, body)
            )
            if fed is not None:
                return fed
            return (
                self._github(method, path, query, body) if github else self._gitlab(method, path, query, body)
            )

    def _github_feedback(self, method: str, path: str, body: Any) -> tuple[int, Any, dict[str, str]] | None:
        """A pull request's state, checks, statuses, reviews and review comments (and replies)."""
        if (
            m := re.fullmatch(r"/repos/([^/]+/[^/]+)/commits/([^/]+)/(check-runs|statuses)", path)
        ) is not None:
            if m[3] == "statuses":
                return 200, self._statuses.get((m[1], m[2]), []), {}
            runs = self._checks.get((m[1], m[2]), [])
            return 200, {"total_count": len(runs), "check_runs": runs}, {}
        if (m := re.fullmatch(r"/repos/([^/]+/[^/]+)/actions/jobs/(\d+)/logs", path)) is not None:
            log = self._logs.get((m[1], int(m[2])))
            return (404, {"message": "Not Found"}, {}) if log is None else (200, Text(log), {})
        m = re.fullmatch(r"/repos/([^/]+/[^/]+)/pulls/(\d+)(?:/(reviews|comments)(?:/(\d+)/replies)?)?", path)
        if m is None or (m[3] is None and method != "GET"):
            return None
        key = (m[1], int(m[2]))
        if m[3] is None:
            return 200, self._pull(*key), {}
        if m[3] == "reviews":
            return 200, self._reviews.get(key, []), {}
        comments = self._review_comments.setdefault(key, [])
        if m[4] is not None and method == "POST":
            reply = {"id": next(self._ids), "pull_request_review_id": next(self._ids), "path": None,
                     "line": None, "body": body["body"], "user": {"login": BOT},
                     "in_reply_to_id": int(m[4])}  # fmt: skip
            comments.append(reply)
            return 201, reply, {}
        return 200, comments, {}

    def _gitlab_feedback(self, method: str, path: str, body: Any) -> tuple[int, Any, dict[str, str]] | None:
        """A merge request's state, pipelines (jobs, traces) and discussions (and replies)."""
        if (m := re.fullmatch(r"/api/v4/projects/([^/]+)/jobs/(\d+)/trace", path)) is not None:
            log = self._logs.get((unquote(m[1]), int(m[2])))
            return (404, {"message": "404 Not Found"}, {}) if log is None else (200, Text(log), {})
        if (m := re.fullmatch(r"/api/v4/projects/([^/]+)/pipelines/(\d+)/jobs", path)) is not None:
            return 200, self._jobs.get((unquote(m[1]), int(m[2])), []), {}
        pattern = (
            r"/api/v4/projects/([^/]+)/merge_requests/(\d+)(?:/(pipelines|discussions)(?:/([^/]+)/notes)?)?"
        )
        m = re.fullmatch(pattern, path)
        if m is None or (m[3] is None and method != "GET"):
            return None
        key = (unquote(m[1]), int(m[2]))
        if m[3] is None:
            return 200, self._pull(*key), {}
        if m[3] == "pipelines":
            return 200, self._pipelines.get(key, []), {}
        discussions = self._discussions.setdefault(key, [])
        if m[4] is not None and method == "POST":
            discussion = next((d for d in discussions if d["id"] == m[4]), None)
            if discussion is None:
                return 404, {"message": "404 Discussion Not Found"}, {}
            note = {
                "id": next(self._ids),
                "body": body["body"],
                "author": {"username": BOT},
                "system": False,
            }
            discussion["notes"].append(note)
            return 201, note, {}
        return 200, discussions, {}

    def _github(
        self, method: str, path: str, query: dict[str, str], body: Any
    ) -> tuple[int, Any, dict[str, str]]:
        edited = re.fullmatch(r"/repos/([^/]+/[^/]+)/issues/comments/(\d+)", path)
        if edited is not None and method == "PATCH":  # an issue's comment, rewritten (triggered runs)
            for bodies in (b for (r, _), b in self._comments.items() if r == edited[1]):
                index = int(edited[2]) - 1
                if 0 <= index < len(bodies):
                    bodies[index] = body["body"]
                    return 200, {"id": index + 1, "body": body["body"]}, {}
            return 404, {"message": "Not Found"}, {}
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
        issue_notes = re.fullmatch(r"/api/v4/projects/([^/]+)/issues/(\d+)/notes", path)
        if issue_notes is not None:  # an issue's notes share the numbers' comments, as GitHub's do
            return self._notes(unquote(issue_notes[1]), int(issue_notes[2]), method, body)
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
            return self._notes(repo, int(number), method, body)
        return 404, {"message": "404 Not Found"}, {}

    def _notes(self, repo: str, number: int, method: str, body: Any) -> tuple[int, Any, dict[str, str]]:
        bodies = self._comments.setdefault((repo, number), [])
        if method == "POST":
            bodies.append(body["body"])
            return 201, {"id": len(bodies), "body": body["body"]}, {}
        return 200, [{"id": i + 1, "body": b} for i, b in enumerate(bodies)], {}


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
            etag = self.headers.get("If-None-Match")
            status, answer, headers = forge.answer(self.command, parts.path, query, body, auth, etag)
            forge.calls.append(Call(self.command, parts.path, query, body, status, auth))
            text = isinstance(answer, Text)
            data = b"" if status == 304 else str(answer).encode() if text else json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if text else "application/json")
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
