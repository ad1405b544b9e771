"""The issue a triggered run came from (issue #24): ``Fixes #N`` in its pull request, and one comment
on the issue — the run's link when it starts, rewritten with its result when it is delivered.

The comment carries a marker with the trigger run's id, and its forge id is kept on the run's
row: a retry looks it up before posting, so the issue gets one comment however often this runs
(DESIGN.md rule 10). The comment's text is the service's own (a status, a link): no agent or
issue text goes into it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session

from orchestrator.delivery.forges import repo_path
from orchestrator.delivery.forges.base import RestClient
from orchestrator.remotes.clone import parse_remote
from orchestrator.remotes.credentials import get_credential
from shared.db import session_scope
from shared.errors import ForgeError, InvalidInput
from shared.models import CredentialKind, Project, TriggerRun
from shared.project_config import ProjectConfig
from shared.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IssueRef:
    """A triggered run's issue: its repository (``owner/name``) and number."""

    run_id: str
    repository: str
    number: int
    comment_id: str | None


def issue_of(session: Session, project_id: str) -> IssueRef | None:
    """The issue the project's run came from; None for a run no issue started."""
    run = session.scalars(select(TriggerRun).where(TriggerRun.project_id == project_id)).first()
    if run is None or "issue.number" not in run.fields or not run.fields.get("repository"):
        return None
    fields = run.fields
    return IssueRef(run.id, str(fields["repository"]), int(fields["issue.number"]), run.issue_comment_id)


def fixes_line(issue: IssueRef | None, remote: str) -> str:
    """``Fixes #N`` (``Fixes owner/name#N`` from another repository), or nothing."""
    if issue is None:
        return ""
    same = issue.repository.lower() == repo_path(remote).lower()
    return f"\n\nFixes {'' if same else issue.repository}#{issue.number}\n"


def marker(run_id: str) -> str:
    return f"<!-- raas:trigger-run:{run_id} -->"


class IssueComments:
    """One issue's comments on GitHub or GitLab, over the same REST client the delivery uses."""

    def __init__(
        self, config: ProjectConfig, remote: str, issue: IssueRef, token: str, transport: Any
    ) -> None:
        host = parse_remote(remote).host.split(":", 1)[0]
        delivery = config.delivery
        guess = "github" if host == "github.com" else "gitlab" if "gitlab" in host else None
        kind = delivery.forge or guess
        if kind is None:
            msg = f'[delivery] forge is not set and {host} is not a known forge; set forge = "github"'
            raise InvalidInput(msg)
        self.github = kind == "github"
        if self.github:
            api = delivery.api_url or (
                "https://api.github.com" if host == "github.com" else f"https://{host}/api/v3"
            )
            self._base = f"/repos/{issue.repository}/issues"
            headers = {"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json"}
        else:
            api = delivery.api_url or f"https://{host}/api/v4"
            self._base = f"/projects/{quote(issue.repository, safe='')}/issues"
            headers = {"PRIVATE-TOKEN": token}
        self._rest = RestClient(api, headers, transport)
        self._issue = issue

    def close(self) -> None:
        self._rest.close()

    def _list_path(self) -> str:
        return f"{self._base}/{self._issue.number}/{'comments' if self.github else 'notes'}"

    def find(self, mark: str) -> str | None:
        found = self._rest.request("GET", self._list_path(), params={"per_page": 100}) or []
        return next((str(c["id"]) for c in found if mark in str(c.get("body") or "")), None)

    def post(self, body: str) -> str:
        return str(self._rest.request("POST", self._list_path(), json={"body": body})["id"])

    def edit(self, comment_id: str, body: str) -> None:
        if self.github:
            self._rest.request("PATCH", f"{self._base}/comments/{comment_id}", json={"body": body})
        else:
            self._rest.request("PUT", f"{self._list_path()}/{comment_id}", json={"body": body})


def note_issue(
    settings: Settings,
    project_id: str,
    text: str,
    *,
    result: bool,
    transport: httpx.BaseTransport | None = None,
) -> None:
    """Write ``text`` in the run's one issue comment: posted once (looked up first), then edited.

    ``result``: this is the run's result (remembered, never written twice). A forge that refuses
    is logged and left: the pull request and the run do not depend on the comment.
    """
    with session_scope() as session:
        issue = issue_of(session, project_id)
        project = session.get(Project, project_id)
        run = session.get(TriggerRun, issue.run_id) if issue is not None else None
        if issue is None or project is None or run is None or run.result_noted or not project.source_repo:
            return
        remote = project.source_repo
        config = ProjectConfig.model_validate(project.config)
        credential = get_credential(session, settings, project.tenant_id, parse_remote(remote).host)
    if credential is None or credential.kind is not CredentialKind.TOKEN:
        log.warning("run %s: no token for %s; the issue is not commented", issue.run_id, remote)
        return
    body = f"{marker(issue.run_id)}\n{text}"
    try:
        comments = IssueComments(config, remote, issue, credential.secret, transport)
        try:
            comment_id = issue.comment_id or comments.find(marker(issue.run_id))
            if comment_id is None:
                comment_id = comments.post(body)
            else:
                comments.edit(comment_id, body)
        finally:
            comments.close()
    except (ForgeError, InvalidInput) as exc:
        where = f"{issue.repository}#{issue.number}"
        log.warning("run %s: commenting on %s failed: %s", issue.run_id, where, exc)
        return
    with session_scope() as session:
        row = session.get_one(TriggerRun, issue.run_id)
        row.issue_comment_id = comment_id
        row.result_noted = row.result_noted or result


def started_text(project_id: str, coordinator_url: str) -> str:
    return f"Constellation started run `{project_id}` for this issue: {_link(project_id, coordinator_url)}"


def _link(project_id: str, coordinator_url: str) -> str:
    return f"{coordinator_url.rstrip('/')}/v1/projects/{project_id}"


def note_result(
    settings: Settings, project_id: str, pull_request_url: str | None, transport: httpx.BaseTransport | None
) -> None:
    """The run's result in its issue comment, once its project's delivery is done."""
    with session_scope() as session:
        project = session.get(Project, project_id)
        if project is None:
            return
        ending = project.status_line or ""
        status = project.status.value
    text = (
        f"Constellation's run `{project_id}` {status}{f' ({ending})' if ending else ''}: "
        f"{_link(project_id, settings.coordinator_url)}"
        + (f"\n\nPull request: {pull_request_url}" if pull_request_url else "")
    )
    note_issue(settings, project_id, text, result=True, transport=transport)
