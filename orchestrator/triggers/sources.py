"""What a verified delivery asks for: a run (with its key, subject and template fields), a review
for the feedback loop, or nothing (ignored, with the reason logged).

Only called once the signature holds (:mod:`orchestrator.triggers.signatures`). The filter's
allow-lists (repositories, labels, author associations) and events are applied here: a delivery
they do not allow is *ignored*, never an error, since the sender did nothing wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.delivery.forges import repo_path
from shared.errors import InvalidInput
from shared.models import TriggerSource
from shared.triggers import TriggerSpec


@dataclass(frozen=True)
class Arrival:
    """A delivery that asks for a run."""

    key: str
    fields: dict[str, Any]
    subject: str | None = None


@dataclass(frozen=True)
class Review:
    """A review comment on a pull request: the feedback loop's, or a run on its branch."""

    key: str
    repository: str
    number: int
    branch: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ignored:
    reason: str


Outcome = Arrival | Review | Ignored


def parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        msg = "the delivery's body is not JSON"
        raise InvalidInput(msg) from exc


def delivery_key(source: TriggerSource, headers: Mapping[str, str]) -> str:
    """The sender's id of this delivery, kept across its redeliveries.

    Raises:
        InvalidInput: the header is missing.
    """
    names = {
        TriggerSource.GITHUB: ("x-github-delivery",),
        TriggerSource.GITLAB: ("idempotency-key", "x-gitlab-event-uuid"),
        TriggerSource.WEBHOOK: ("webhook-id",),
    }[source]
    for name in names:
        value = headers.get(name, "").strip()
        if value:
            return value[:200]
    msg = f"the delivery has no {names[-1]} header (its id, to take it once)"
    raise InvalidInput(msg)


def is_command(text: str, command: str) -> bool:
    """Whether a comment is the trigger's command: its first line is the command, or the command
    and words after a space (``/raas run please``); ``/raas running`` is not ``/raas run``."""
    first = text.strip().split("\n", 1)[0].strip()
    return first == command or first.startswith(command + " ")


def _allowed_repo(spec: TriggerSpec, repository: str) -> bool:
    allowed = spec.filter.repositories or ([repo_path(spec.template.repo)] if spec.template.repo else [])
    return repository.lower() in {r.lower() for r in allowed}


def _issue_fields(repository: str, issue: Mapping[str, Any], labels: list[str], event: str) -> dict[str, Any]:
    return {
        "issue.number": int(issue.get("number") or issue.get("iid") or 0),
        "issue.title": str(issue.get("title") or ""),
        "issue.body": str(issue.get("body") or issue.get("description") or ""),
        "issue.url": str(issue.get("html_url") or issue.get("url") or ""),
        "issue.labels": ", ".join(labels),
        "repository": repository,
        "event": event,
    }


def github(spec: TriggerSpec, key: str, kind: str, data: Mapping[str, Any]) -> Outcome:
    """A GitHub delivery (``X-GitHub-Event`` is ``kind``)."""
    repository = str((data.get("repository") or {}).get("full_name") or "")
    action = str(data.get("action") or "")
    if kind == "ping":
        return Ignored("ping")
    if not _allowed_repo(spec, repository):
        return Ignored(f"repository {repository or '(none)'} is not allowed")
    if kind == "pull_request_review_comment" or (kind == "pull_request_review" and action == "submitted"):
        if "review_comment" not in spec.filter.events:
            return Ignored(f"{kind} is not one of the trigger's events")
        pull = data.get("pull_request") or {}
        comment = data.get("comment") or data.get("review") or {}
        review = {
            "id": str(comment.get("id") or key),
            "state": str(comment.get("state") or "commented").lower(),
            "path": comment.get("path"),
            "line": comment.get("line"),
            "body": str(comment.get("body") or ""),
            "author": str((comment.get("user") or {}).get("login") or "") or None,
            "inline": kind == "pull_request_review_comment",
        }
        fields = {"comment.body": review["body"], "repository": repository, "event": kind, "review": review}
        branch = str((pull.get("head") or {}).get("ref") or "")
        return Review(key, repository, int(pull.get("number") or 0), branch, fields)
    issue = data.get("issue") or {}
    association = str((data.get("comment") or issue).get("author_association") or "")
    if spec.filter.author_associations and association not in spec.filter.author_associations:
        return Ignored(f"author association {association or '(none)'} is not allowed")
    labels = [str(label.get("name")) for label in issue.get("labels") or []]
    event = {"opened": "issue_opened", "labeled": "issue_labeled", "assigned": "issue_assigned"}.get(action)
    if kind == "issue_comment" and action == "created":
        body = str((data.get("comment") or {}).get("body") or "")
        if not is_command(body, spec.filter.command):
            return Ignored("the comment is not the trigger's command")
        event = "comment_command"
    elif kind != "issues" or event is None:
        return Ignored(f"{kind}.{action} is not an event triggers take")
    if event not in spec.filter.events:
        return Ignored(f"{event} is not one of the trigger's events")
    label = str((data.get("label") or {}).get("name") or "")
    wanted = set(spec.filter.labels)
    if wanted and not (label in wanted if event == "issue_labeled" else wanted & set(labels)):
        return Ignored("none of the trigger's labels")
    fields = _issue_fields(repository, issue, labels, event)
    fields["issue.author"] = str((issue.get("user") or {}).get("login") or "")
    if event == "comment_command":
        fields["comment.body"] = str((data.get("comment") or {}).get("body") or "")
    return Arrival(key, fields, subject=f"{repository}#{fields['issue.number']}")


def gitlab(spec: TriggerSpec, key: str, kind: str, data: Mapping[str, Any]) -> Outcome:
    """A GitLab delivery (``X-Gitlab-Event`` is ``kind``)."""
    repository = str((data.get("project") or {}).get("path_with_namespace") or "")
    if not _allowed_repo(spec, repository):
        return Ignored(f"repository {repository or '(none)'} is not allowed")
    attributes = data.get("object_attributes") or {}
    labels = [str(label.get("title")) for label in data.get("labels") or []]
    changes = data.get("changes") or {}
    if kind == "Note Hook":
        if attributes.get("noteable_type") != "Issue":
            return Ignored("a note on something other than an issue")
        if not is_command(str(attributes.get("note") or ""), spec.filter.command):
            return Ignored("the note is not the trigger's command")
        event, issue = "comment_command", data.get("issue") or {}
    elif kind == "Issue Hook":
        issue = attributes
        added = {str(x.get("title")) for x in (changes.get("labels") or {}).get("current") or []} - {
            str(x.get("title")) for x in (changes.get("labels") or {}).get("previous") or []
        }
        action = str(attributes.get("action") or "")
        event = (
            "issue_opened" if action == "open" else
            "issue_labeled" if added else
            "issue_assigned" if "assignees" in changes else ""
        )  # fmt: skip
        if not event:
            return Ignored(f"issue {action or 'change'} is not an event triggers take")
        labels_checked = added if event == "issue_labeled" else set(labels)
        if spec.filter.labels and not set(spec.filter.labels) & labels_checked:
            return Ignored("none of the trigger's labels")
    else:
        return Ignored(f"{kind} is not an event triggers take")
    if event not in spec.filter.events:
        return Ignored(f"{event} is not one of the trigger's events")
    fields = _issue_fields(repository, issue, labels, event)
    fields["issue.author"] = str((data.get("user") or {}).get("username") or "")
    if event == "comment_command":
        fields["comment.body"] = str(attributes.get("note") or "")
    return Arrival(key, fields, subject=f"{repository}#{fields['issue.number']}")


def generic(key: str, data: Any) -> Outcome:
    if not isinstance(data, dict):
        msg = "a hook's body must be a JSON object"
        raise InvalidInput(msg)
    return Arrival(key, {"payload": data})


def parse(spec: TriggerSpec, headers: Mapping[str, str], body: bytes) -> Outcome:
    """What a verified delivery asks for.

    Raises:
        InvalidInput: the body is not JSON, or the delivery id header is missing.
    """
    key = delivery_key(spec.source, headers)
    data = parse_json(body)
    if spec.source is TriggerSource.GITHUB:
        return github(spec, key, headers.get("x-github-event", ""), data)
    if spec.source is TriggerSource.GITLAB:
        return gitlab(spec, key, headers.get("x-gitlab-event", ""), data)
    return generic(key, data)
