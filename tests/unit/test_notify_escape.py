"""Agent text in notifications is inert in each medium (orchestrator.notify.escape), the
webhook's signature is the Standard Webhooks one (``whsec_`` keys included), and the events people
may subscribe to are the ones the issue names."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.notify.escape import ZWSP, html_text, mrkdwn, mrkdwn_link, one_line
from orchestrator.notify.media.webhook import sign
from shared.event_payloads import NOTIFIABLE

pytestmark = pytest.mark.unit


@given(st.text())
def test_mrkdwn_text_can_hold_no_control_sequence_and_no_live_mention(text: str) -> None:
    escaped = mrkdwn(text)
    assert "<" not in escaped
    assert ">" not in escaped
    assert re.search(f"@(?!{ZWSP})", escaped) is None
    # Every & is the start of one of the three entities
    assert re.search(r"&(?!amp;|lt;|gt;)", escaped) is None


def test_the_mentions_slack_knows_come_out_as_text() -> None:
    escaped = mrkdwn("<!channel> <!here> <@U024BE7LH> @here & <https://x|y>")
    assert escaped == (
        f"&lt;!channel&gt; &lt;!here&gt; &lt;@{ZWSP}U024BE7LH&gt; @{ZWSP}here &amp; &lt;https://x|y&gt;"
    )


def test_a_link_goes_only_to_an_http_url_and_its_label_is_escaped() -> None:
    assert mrkdwn_link("https://x.example/a?b=1&c=2", "PR <!here>") == (
        "<https://x.example/a?b=1&amp;c=2|PR &lt;!here&gt;>"
    )
    assert mrkdwn_link("javascript:alert(1)", "PR") == "PR"


@given(st.text())
def test_one_line_is_one_line(text: str) -> None:
    line = one_line(text, 50)
    assert "\n" not in line
    assert "\r" not in line
    assert len(line) <= 50


def test_html_text_shows_markup_as_text() -> None:
    assert html_text('<script>alert("x")</script>') == "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"


def test_the_signature_is_v1_base64_hmac_sha256_of_id_timestamp_body() -> None:
    body = '{"type":"project_completed"}'
    expected = hmac.new(b"k3y", f"msg_1.1700000000.{body}".encode(), hashlib.sha256).digest()
    assert sign("k3y", "msg_1", 1700000000, body) == "v1," + base64.b64encode(expected).decode()
    # A Standard Webhooks secret (whsec_ + base64) signs with the bytes it encodes
    key = b"\x01\x02secret-bytes"
    whsec = "whsec_" + base64.b64encode(key).decode()
    expected = hmac.new(key, f"msg_1.1700000000.{body}".encode(), hashlib.sha256).digest()
    assert sign(whsec, "msg_1", 1700000000, body) == "v1," + base64.b64encode(expected).decode()


def test_the_subscribable_events_are_those_the_issue_names() -> None:
    # Each model says NOTIFY; a new type joins there (shared.event_payloads.NOTIFIABLE).
    assert NOTIFIABLE == (
        "approval_waiting", "budget_warning", "project_completed", "project_failed", "project_paused",
        "project_stopped", "trigger_refused",
    )  # fmt: skip
