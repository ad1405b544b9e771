"""Triggers over real HTTP (issue #24): the coordinator's API served by uvicorn on loopback, the
tests' git server and fake forge, and deliveries signed as GitHub signs them.

    with trigger_world(tmp_path) as world:
        trigger = world.add_github_trigger()
        answer = world.deliver(trigger, labeled_issue(7, "bug"), delivery="d-1")
        world.start(answer.json()["run"])
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from cryptography.fernet import Fernet
from pydantic import SecretStr
from sqlalchemy import delete, func, select

from orchestrator.api import create_app
from orchestrator.remotes.credentials import set_credential
from orchestrator.triggers.start import start_run
from shared.db import session_scope
from shared.events import NullBus
from shared.models import CredentialKind, GitCredential, Project, RunStatus, Trigger, TriggerRun
from shared.settings import Settings, get_settings
from tests.support.coordinator import Coordinator
from tests.support.dashboard import Server
from tests.support.forge import FakeForge, serve_forge
from tests.support.git_server import GitServer, serve_git

REPO = "alice/app"
SECRET = "a-webhook-secret-of-32-characters"
TEMPLATE = (
    "Fix issue #{{ issue.number }} of {{ repository }}.\n\nTitle:{{ issue.title }}\nBody:{{ issue.body }}\n"
)


@dataclass
class RecordingLauncher:
    """Stands in for the coordinator queue: remembers the runs sent, in order."""

    launched: list[str] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def launch(self, run_id: str) -> None:
        with self._lock:
            self.launched.append(run_id)


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def labeled_issue(number: int, label: str, body: str = "It breaks.", repo: str = REPO) -> dict[str, Any]:
    """GitHub's ``issues`` delivery, action ``labeled``, as much of it as triggers read."""
    issue = {
        "number": number,
        "title": f"Issue {number}",
        "body": body,
        "html_url": f"https://github.example/{repo}/issues/{number}",
        "user": {"login": "bob"},
        "labels": [{"name": label}],
        "author_association": "MEMBER",
    }
    return {"action": "labeled", "issue": issue, "label": {"name": label}, "repository": {"full_name": repo}}


def gitlab_labeled_issue(iid: int, label: str, repo: str = REPO) -> dict[str, Any]:
    """GitLab's ``Issue Hook`` for issue ``iid`` given ``label``, as much of it as triggers read."""
    attributes = {
        "iid": iid,
        "title": f"Issue {iid}",
        "description": "It breaks.",
        "url": f"https://gitlab.example/{repo}/-/issues/{iid}",
        "action": "update",
    }
    return {
        "object_kind": "issue",
        "user": {"username": "bob"},
        "project": {"path_with_namespace": repo},
        "object_attributes": attributes,
        "labels": [{"title": label}],
        "changes": {"labels": {"previous": [], "current": [{"title": label}]}},
    }


def issue_comment(number: int, text: str, repo: str = REPO) -> dict[str, Any]:
    """GitHub's ``issue_comment`` delivery, action ``created``, on issue ``number``."""
    issue = labeled_issue(number, "raas", repo=repo)["issue"]
    comment = {"id": 900 + number, "body": text, "user": {"login": "bob"}, "author_association": "MEMBER"}
    return {"action": "created", "issue": issue, "comment": comment, "repository": {"full_name": repo}}


def standard_signature(secret: str, webhook_id: str, stamp: int, body: bytes) -> str:
    """Standard Webhooks' ``webhook-signature``: v1, base64 HMAC-SHA256 of id.timestamp.body."""
    signed = hmac.new(secret.encode(), f"{webhook_id}.{stamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(signed.digest()).decode()


@dataclass
class World:
    settings: Settings
    server: GitServer
    forge: FakeForge
    http: httpx.Client
    launcher: RecordingLauncher
    coordinator: Coordinator
    url: str

    def add_trigger(self, spec: dict[str, Any]) -> dict[str, Any]:
        response = self.http.post("/v1/triggers", json=spec)
        assert response.status_code == 201, response.text
        created: dict[str, Any] = response.json()
        return created

    def github_spec(self, name: str = "issues", **changes: Any) -> dict[str, Any]:
        delivery = f'[delivery]\npull_request = "ready"\nforge = "github"\napi_url = "{self.forge.url}"\n'
        spec: dict[str, Any] = {
            "name": name,
            "source": "github",
            "secret": SECRET,
            "filter": {"events": ["issue_labeled"], "labels": ["raas"]},
            "template": {"repo": self.url, "ref": "main", "prompt": TEMPLATE, "config": delivery},
            "limits": {"budget_per_run_usd": "2", "max_concurrent": 5},
        }
        return {**spec, **changes}

    def deliver(
        self,
        trigger_id: str,
        payload: dict[str, Any],
        delivery: str,
        *,
        signature: str | None = None,
        event: str = "issues",
    ) -> httpx.Response:
        body = json.dumps(payload).encode()
        headers = {
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": signature or sign(body),
            "Content-Type": "application/json",
        }
        return self.http.post(f"/v1/hooks/{trigger_id}", content=body, headers=headers)

    def deliver_gitlab(
        self,
        trigger_id: str,
        payload: dict[str, Any],
        uuid: str,
        *,
        token: str = SECRET,
        event: str = "Issue Hook",
    ) -> httpx.Response:
        headers = {"X-Gitlab-Event": event, "X-Gitlab-Event-UUID": uuid, "X-Gitlab-Token": token}
        return self.http.post(
            f"/v1/hooks/{trigger_id}", content=json.dumps(payload).encode(), headers=headers
        )

    def deliver_hook(
        self, trigger_id: str, payload: Any, webhook_id: str, *, age_s: int = 0, secret: str = SECRET
    ) -> httpx.Response:
        """A generic hook's delivery, signed as Standard Webhooks signs it, ``age_s`` seconds old."""
        body, stamp = json.dumps(payload).encode(), int(time.time()) - age_s
        headers = {
            "webhook-id": webhook_id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": standard_signature(secret, webhook_id, stamp, body),
            "Content-Type": "application/json",
        }
        return self.http.post(f"/v1/hooks/{trigger_id}", content=body, headers=headers)

    def start(self, run_id: str) -> RunStatus:
        """What the coordinator queue's consumer does with a launched run."""
        return start_run(run_id, self.settings, self.coordinator.dispatcher, NullBus())


@contextmanager
def trigger_world(tmp_path: Path) -> Iterator[World]:
    """The API on loopback (a recording launcher), the git server with ``alice/app`` and the forge,
    the cluster's credential for the git host; every trigger removed afterwards."""
    settings = get_settings().model_copy(
        update={"data_dir": tmp_path / "data", "secret_key": SecretStr(Fernet.generate_key().decode())}
    )
    settings.workspaces_dir().mkdir(parents=True)
    coordinator = Coordinator()
    launcher = RecordingLauncher()
    with serve_git(tmp_path / "served") as server, serve_forge(token=server.password) as forge:
        url = server.create_repo(REPO, {"README.md": "hello\n"})
        host = server.base_url.removeprefix("http://")
        with session_scope() as session:
            session.execute(delete(Trigger))
            session.execute(delete(GitCredential).where(GitCredential.host == host))
            set_credential(
                session, settings, None, host, CredentialKind.TOKEN, server.username, server.password
            )
        app = create_app(settings, coordinator.dispatcher, NullBus())
        app.state.trigger_launcher = launcher
        api = Server(app)
        api.start()
        token = settings.api_token.get_secret_value()
        http = httpx.Client(base_url=api.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)
        try:
            yield World(settings, server, forge, http, launcher, coordinator, url)
        finally:
            http.close()
            api.stop()
            with session_scope() as session:
                session.execute(delete(Trigger))


def trigger_runs() -> list[TriggerRun]:
    """Every trigger run, oldest first, detached from its session."""
    with session_scope() as session:
        rows = list(session.scalars(select(TriggerRun).order_by(TriggerRun.created_at)))
        session.expunge_all()
    return rows


def project_count() -> int:
    with session_scope() as session:
        return session.scalar(select(func.count()).select_from(Project)) or 0
