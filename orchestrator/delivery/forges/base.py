"""The one small interface a forge implements to carry a project's pull request.

Every call is one REST request (a rate-limited one is retried after the time the forge asks
for, a few times); a forge's refusal is a :class:`ForgeError` carrying the forge's own message,
which the delivery reports in ``delivery_failed``. Nothing here ever puts the token in a message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
from pydantic import BaseModel, Field

from orchestrator.scheduling.pr_events import LOG_TAIL_CHARS, PrEvent
from shared.errors import ForgeError

RATE_LIMIT_RETRIES = 3
MAX_WAIT_S = 30.0
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class PullRequest:
    number: int
    url: str
    draft: bool


#: What the service writes on a pull request carries this (a hidden HTML comment): the poller
#: never reads its own round comments and replies back as a reviewer's feedback.
OWN_MARKER = "<!-- raas:"


class PollState(BaseModel):
    """What the poller remembers of one pull request between passes (``pr_follows.poll_state``)."""

    #: The ETag of each path's last answer: asked again with ``If-None-Match``, an unchanged one
    #: is a 304 with no body (not counted against the rate limit by GitHub).
    etags: dict[str, str] = Field(default_factory=dict)
    head: str | None = None
    #: Failed checks already reported (their logs are fetched once).
    seen: list[str] = Field(default_factory=list)
    #: GitLab: the newest merge-request note read.
    notes_after: int = 0


class Forge(Protocol):
    """A pull request's lifecycle as Constellation uses it; ``head`` is the project's branch."""

    def find_pull_request(self, head: str, base: str | None) -> PullRequest | None:
        """The open pull request from ``head``, if there is one (looked up before opening one)."""
        ...

    def open_pull_request(
        self, head: str, base: str, title: str, body: str, *, draft: bool
    ) -> PullRequest: ...

    def update_pull_request(
        self, pull_request: PullRequest, title: str, body: str, *, draft: bool
    ) -> PullRequest:
        """Rewrite its title and body, and make it a draft or ready for review as ``draft`` says
        where the forge's REST API can (GitHub's cannot): the pull request as the forge now shows it."""
        ...

    def comment_bodies(self, pull_request: PullRequest) -> list[str]: ...

    def comment(self, pull_request: PullRequest, body: str) -> None: ...

    # What the PR feedback loop reads and writes on a followed pull request.

    def poll(self, number: int, state: PollState, *, reviews: bool) -> list[PrEvent]:
        """The pull request's news since ``state`` (updated in place): merged or closed, its head's
        failed checks (with their log's tail), and (``reviews``) reviews that ask for changes or
        comment. Unchanged answers cost a 304 each."""
        ...

    def own_replies(self, number: int) -> list[str]:
        """The bodies of the replies we posted on review comments (looked up before replying:
        each carries its marker)."""
        ...

    def reply(self, number: int, comment_id: str, body: str) -> None:
        """Answer a review comment in its thread (GitHub) or its discussion (GitLab)."""
        ...

    def close(self) -> None: ...


def tail(text: str) -> str:
    """The end of a job's log, cut to LOG_TAIL_CHARS (what reaches the prompt, quoted)."""
    return text[-LOG_TAIL_CHARS:]


def own(body: str | None) -> bool:
    return OWN_MARKER in (body or "")


def _wait_s(response: httpx.Response) -> float | None:
    """How long a rate-limited answer asks us to wait; None when it is not one."""
    limited = response.status_code == 429 or (
        response.status_code == 403 and response.headers.get("x-ratelimit-remaining") == "0"
    )
    if not limited:
        return None
    retry_after = response.headers.get("retry-after")
    if retry_after is not None:
        try:
            return min(float(retry_after), MAX_WAIT_S)
        except ValueError:
            return MAX_WAIT_S
    reset = response.headers.get("x-ratelimit-reset") or response.headers.get("ratelimit-reset")
    if reset is not None:
        try:
            return min(max(float(reset) - time.time(), 0.0), MAX_WAIT_S)
        except ValueError:
            return MAX_WAIT_S
    return 1.0


def forge_message(response: httpx.Response) -> str:
    """The forge's own words for a refusal: GitHub's message and errors, GitLab's message or error."""
    try:
        data: Any = response.json()
    except ValueError:
        return response.text.strip()[:300] or response.reason_phrase
    if not isinstance(data, dict):
        return str(data)[:300]
    message = data.get("message") or data.get("error") or response.reason_phrase
    if isinstance(message, (list, dict)):
        message = str(message)
    details = [
        str(e.get("message") or e.get("code") or e) if isinstance(e, dict) else str(e)
        for e in data.get("errors") or []
    ]
    return "; ".join([str(message), *details])[:500]


class RestClient:
    """httpx with the forge's auth headers, rate-limit waits, and refusals as ForgeError."""

    def __init__(
        self, base_url: str, headers: dict[str, str], transport: httpx.BaseTransport | None = None
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=headers, timeout=TIMEOUT_S, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._send(method, path, **kwargs)
        return response.json() if response.content else None

    def get_if_changed(self, path: str, state: PollState, etags: dict[str, str], **kwargs: Any) -> Any:
        """GET ``path`` with the ETag ``state`` holds for it: None when unchanged (a 304), else the
        answer. The answer's ETag goes into ``etags`` (the next pass's) either way."""
        known = state.etags.get(path)
        headers = {"If-None-Match": known} if known else {}
        response = self._send("GET", path, headers=headers, **kwargs)
        etag = response.headers.get("etag") or (known if response.status_code == 304 else None)
        if etag:
            etags[path] = etag
        if response.status_code == 304:
            return None
        return response.json() if response.content else None

    def get_text(self, path: str) -> str:
        """A plain-text answer (a job's log), following a redirect to where it is stored."""
        return self._send("GET", path, follow_redirects=True).text

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        for attempt in range(RATE_LIMIT_RETRIES + 1):
            try:
                response = self._http.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                raise ForgeError(0, f"{type(exc).__name__}: the forge did not answer") from exc
            wait = _wait_s(response)
            if wait is not None and attempt < RATE_LIMIT_RETRIES:
                time.sleep(wait)
                continue
            if response.status_code >= 400:
                raise ForgeError(response.status_code, forge_message(response))
            return response
        raise AssertionError  # the loop returns or raises
