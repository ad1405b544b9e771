"""What Slack and mail receive (issue #24): the status, the cost, the diff's size, the pull request
and dashboard links, and what agents wrote escaped for each medium so that nothing in it notifies,
links or runs — received on loopback by a Slack-shaped receiver and an aiosmtpd server."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr
from sqlalchemy import delete, select

from orchestrator.notify import subscriptions
from orchestrator.notify.escape import ZWSP
from orchestrator.notify.sender import NotificationSender
from orchestrator.notify.subscriptions import SubscriptionIn
from orchestrator.scheduling import transitions, workspace
from orchestrator.scheduling.outbox import Outbox
from orchestrator.workspaces import get_store
from shared.db import session_scope
from shared.event_payloads import ProjectFailed
from shared.models import (
    Delivery,
    DeliveryKind,
    DeliveryStatus,
    Notification,
    Project,
    ProjectStatus,
    Subscription,
    new_id,
    utcnow,
)
from shared.settings import Settings
from tests.support.receivers import serve_receiver, serve_smtp

pytestmark = pytest.mark.integration

# What an agent (or whoever named the project) wrote: every way to notify, link or run something.
HOSTILE_NAME = "<!channel> fix @here\r\nBcc: victim@example.org"
HOSTILE_REASON = (
    "<!here> <@U024BE7LH> <!subteam^S1> @channel @everyone & <https://evil.example|click> "
    "<script>alert(1)</script> *bold*"
)
PR_URL = "https://git.example.org/o/r/pull/7"
SLACK_PATH = "/services/T000/B000/XXXXSECRETXXXX"
SMTP_PASSWORD = "smtp-pass-4e1d"


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Iterator[Settings]:
    yield Settings(
        secret_key=SecretStr(Fernet.generate_key().decode()), data_dir=tmp_path, notify_backoff_s=0.01
    )
    with session_scope() as session:
        session.execute(delete(Subscription))


def failed_project(settings: Settings, subscribe: SubscriptionIn) -> str:
    """A project with a two-file change in its workspace and a pull request, subscribed to, that
    then fails with a hostile reason."""
    project_id = new_id()
    files = settings.data_dir / "files"
    files.mkdir()
    (files / "README.md").write_text("hello\n")
    workspace.create_repo(get_store(settings).read(project_id), files)
    clone = settings.data_dir / "clone"
    bare = get_store(settings).read(project_id)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "clone", "-q", str(bare), str(clone)], check=True)
    (clone / "a.py").write_text("print(1)\nprint(2)\n")
    (clone / "README.md").write_text("hello, world\n")
    subprocess.run([*git, "-C", str(clone), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(clone), "commit", "-qm", "work"], check=True)
    subprocess.run([*git, "-C", str(clone), "push", "-q", "origin", "HEAD:main"], check=True)
    with session_scope() as session:
        session.add(
            Project(
                id=project_id,
                name=HOSTILE_NAME,
                prompt="x",
                config={},
                status=ProjectStatus.RUNNING,
                budget_limit_usd=Decimal(5),
                spent_usd=Decimal("1.5"),
                created_at=utcnow(),
            )
        )
        session.flush()
        session.add(
            Delivery(
                project_id=project_id, key="project", kind=DeliveryKind.PROJECT, remote="https://x",
                branch="b", status=DeliveryStatus.DELIVERED, round=1, noted_round=1, attempts=1,
                pull_request_url=PR_URL, created_at=utcnow(),
            )
        )  # fmt: skip
        body = subscribe.model_copy(update={"project_id": project_id})
        subscriptions.add(session, settings, None, body)
    with session_scope() as session:
        project = session.get_one(Project, project_id)
        transitions.end(Outbox(session), project, ProjectFailed(reason=HOSTILE_REASON, task="t1"))
    return project_id


def sent(project_id: str) -> Notification:
    with session_scope() as session:
        return session.scalars(select(Notification).where(Notification.project_id == project_id)).one()


def test_slack_gets_block_kit_with_the_facts_and_agent_text_that_notifies_no_one(settings: Settings) -> None:
    with serve_receiver() as (slack, base):
        project_id = failed_project(
            settings,
            SubscriptionIn(medium="slack", secret=SecretStr(base + SLACK_PATH), events=["project_failed"]),
        )
        assert NotificationSender(settings).run_once() == 1
    (received,) = slack.received
    assert received.path == SLACK_PATH
    text = received.body.decode()
    message = json.loads(text)
    # The facts: status, cost, diff stats, the pull request and the dashboard
    fields = " ".join(f["text"] for b in message["blocks"] for f in b.get("fields", []))
    assert "*Status*\nfailed" in fields
    assert "*Cost*\n$1.5000 of $5.00" in fields
    assert "2 files changed, 3 insertions(+), 1 deletion(-)" in fields
    assert f"<{PR_URL}|Pull request>" in text
    assert f"/projects/{project_id}|Dashboard>" in text
    # The agent's text: shown, escaped, and nothing in it is a mention, a broadcast or a link
    for live in (
        "<!channel>",
        "<!here>",
        "<!subteam",
        "<@U",
        "<https://evil",
        "<script>",
        "@here",
        "@channel",
    ):
        assert live not in text, live
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert f"@{ZWSP}everyone" in text
    assert "&amp;" in text
    # And the Slack URL (its secret) is not what `raas notify ls` shows
    with session_scope() as session:
        (listed,) = subscriptions.listing(session, None)
    assert SLACK_PATH not in listed.target
    assert sent(project_id).status.value == "sent"


def test_mail_goes_over_smtp_with_its_login_as_text_and_escaped_html(settings: Settings) -> None:
    with serve_smtp("raas", SMTP_PASSWORD) as (box, port):
        subscribe = SubscriptionIn.model_validate(
            {
                "medium": "mail",
                "target": "Ops <ops@example.org>, dev@example.org",
                "secret": SMTP_PASSWORD,
                "smtp": {"host": "127.0.0.1", "port": port, "username": "raas", "tls": "none",
                         "sender": "raas@example.org"},
            }
        )  # fmt: skip
        project_id = failed_project(settings, subscribe)
        assert NotificationSender(settings).run_once() == 1
    assert box.logins == ["LOGIN:ok"] or box.logins == ["PLAIN:ok"]
    (message,) = box.messages
    assert box.envelopes == [("raas@example.org", ["ops@example.org", "dev@example.org"])]
    notification = sent(project_id)
    assert message["Message-ID"] == f"<{notification.id}@example.org>"
    # One subject line: the name's line break did not start a header of its own
    assert message["Bcc"] is None
    assert "\n" not in str(message["Subject"])
    assert str(message["Subject"]).startswith("[raas] <!channel> fix @here Bcc: victim@example.org")
    text = message.get_body(("plain",)).get_content()  # type: ignore[union-attr]
    html = message.get_body(("html",)).get_content()  # type: ignore[union-attr]
    assert "Cost: $1.5000 of $5.00" in text
    assert "2 files changed" in text
    assert f"Pull request: {PR_URL}" in text
    assert HOSTILE_REASON in text  # plain text shows it as written
    assert "<script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert f'<a href="{PR_URL}">Pull request</a>' in html
    assert f"/projects/{project_id}" in html


def test_a_wrong_smtp_password_is_a_failed_attempt_that_never_shows_the_password(settings: Settings) -> None:
    with serve_smtp("raas", "the-right-one") as (box, port):
        subscribe = SubscriptionIn.model_validate(
            {
                "medium": "mail",
                "target": "ops@example.org",
                "secret": SMTP_PASSWORD,
                "smtp": {"host": "127.0.0.1", "port": port, "username": "raas", "tls": "none",
                         "sender": "raas@example.org"},
            }
        )  # fmt: skip
        project_id = failed_project(settings, subscribe)
        assert NotificationSender(settings).run_once() == 0
    assert box.messages == []
    notification = sent(project_id)
    assert notification.status.value == "pending"
    assert notification.last_error is not None
    assert "SMTPAuthenticationError" in notification.last_error
    assert SMTP_PASSWORD not in notification.last_error
