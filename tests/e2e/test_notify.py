"""``raas notify`` against a running coordinator (issue #24): bad input is one line naming what is
wrong, a non-zero exit and nothing created; a subscription is listed, paused, resumed and
removed; and the coordinator's own sender delivers a project's event to a loopback webhook,
signed, once."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import func, select

from shared.db import session_scope
from shared.models import Subscription
from tests.support.bad_input import assert_one_line_error
from tests.support.receivers import HookReceiver, Received, serve_receiver
from tests.support.stack import ROOT_DIR, Stack

pytestmark = [pytest.mark.e2e]
SECRET = "e2e-hmac-key-0b9a"


@pytest.fixture(scope="module")
def stack(database_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    env = {"RAAS_SECRET_KEY": Fernet.generate_key().decode(), "RAAS_NOTIFY_INTERVAL_S": "0.2"}
    logs = tmp_path_factory.mktemp("notify")
    running = Stack(log_dir=logs, script=ROOT_DIR / "examples/scripts/hello.json", env=env).start(workers=0)
    yield running
    running.stop()


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    return path


def subscriptions() -> int:
    with session_scope() as session:
        return session.scalar(select(func.count()).select_from(Subscription)) or 0


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["webhook", "ftp://example.org/hook", "--secret-file", "{secret}"], ["webhook URL", "http://"]),
        (
            ["webhook", "http://127.0.0.1:9/hook"],
            ["webhook notification needs its HMAC secret", "--secret-file"],
        ),
        (["slack"], ["slack notification needs its secret", "incoming webhook"]),
        (["mail", "ops@example.org", "--smtp", "smtp://raas@mail.example.org"], ["mail", "SMTP password"]),
        (["mail", "ops@example.org", "--secret-file", "{secret}"], ["SMTP server", "--smtp"]),
        (["webhook", "https://example.org/h", "--secret-file", "{secret}", "--events", "nope"], ["'nope'"]),
    ],
)
def test_bad_input_is_one_line_and_creates_nothing(
    stack: Stack, secret_file: Path, args: list[str], fragments: list[str]
) -> None:
    before = subscriptions()
    result = stack.cli("notify", "add", *(a.replace("{secret}", str(secret_file)) for a in args))
    assert_one_line_error(result, *fragments)
    assert SECRET not in result.stderr
    assert subscriptions() == before


def test_the_coordinator_sends_a_projects_event_to_a_subscribed_webhook_once(
    stack: Stack, secret_file: Path, tmp_path: Path
) -> None:
    with serve_receiver() as (hooks, base):
        # Given a webhook subscribed to stops, through the CLI
        added = stack.cli(
            "notify",
            "add",
            "webhook",
            f"{base}/hook",
            "--secret-file",
            str(secret_file),
            "--events",
            "project_stopped",
        )
        assert added.returncode == 0, added.stderr
        subscription_id = added.stdout.split()[0]
        assert "active" in stack.cli("notify", "ls").stdout
        # When a project (no worker runs it) is stopped
        (tmp_path / "PROMPT.md").write_text("Say hello.\n")
        submitted = stack.cli("submit", str(tmp_path))
        assert submitted.returncode == 0, submitted.stderr
        project_id = submitted.stdout.strip()
        assert stack.cli("stop", project_id).returncode == 0
        # Then the coordinator's sender delivers it, signed, once
        received = wait_for(hooks, 1)
        time.sleep(1)  # a second copy, if there were one, would come within the sender's next passes
    assert len(hooks.received) == 1
    (delivery,) = received
    body = json.loads(delivery.body)
    assert (body["type"], body["data"]["project"]["id"]) == ("project_stopped", project_id)
    signed = (
        f"{delivery.headers['webhook-id']}.{delivery.headers['webhook-timestamp']}.".encode() + delivery.body
    )
    expected = base64.b64encode(hmac.new(SECRET.encode(), signed, hashlib.sha256).digest()).decode()
    assert delivery.headers["webhook-signature"] == f"v1,{expected}"
    # And it can be paused, resumed and removed; the listing never shows the secret
    assert "paused" in stack.cli("notify", "pause", subscription_id).stdout
    listing = stack.cli("notify", "ls", "--json")
    assert SECRET not in listing.stdout
    assert json.loads(listing.stdout)[0]["status"] == "paused"
    assert "active" in stack.cli("notify", "resume", subscription_id).stdout
    assert stack.cli("notify", "rm", subscription_id).returncode == 0
    assert json.loads(stack.cli("notify", "ls", "--json").stdout) == []
    assert SECRET not in stack.logs()


def wait_for(hooks: HookReceiver, count: int, timeout_s: float = 60.0) -> list[Received]:
    deadline = time.monotonic() + timeout_s
    while len(hooks.received) < count:
        assert time.monotonic() < deadline, "the coordinator sent nothing"
        time.sleep(0.1)
    return list(hooks.received)
