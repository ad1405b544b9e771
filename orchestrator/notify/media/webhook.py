"""A signed webhook, the Standard Webhooks way (what Stripe-style signing converged on).

Each attempt POSTs the same JSON body with ``webhook-id`` (the notification's id: the same on
every attempt, so the receiver drops a repeat), ``webhook-timestamp`` (this attempt's, in Unix
seconds: receivers refuse old ones) and ``webhook-signature``: ``v1,`` and the base64 HMAC-SHA256
of ``{id}.{timestamp}.{body}`` under the subscription's secret. A secret written the Standard
Webhooks way (``whsec_`` and base64) is that key's bytes; any other secret is its UTF-8 bytes.
Any 2xx answer delivers it; anything else, a redirect included, is a failed attempt.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time

import httpx

from orchestrator.notify.media.base import TIMEOUT_S, Endpoint, failure
from orchestrator.notify.news import News

USER_AGENT = "constellation-notify/1"


def signing_key(secret: str) -> bytes:
    if secret.startswith("whsec_"):
        try:
            return base64.b64decode(secret.removeprefix("whsec_"), validate=True)
        except ValueError:
            pass
    return secret.encode()


def sign(secret: str, notification_id: str, timestamp: int, body: str) -> str:
    signed = f"{notification_id}.{timestamp}.{body}".encode()
    digest = hmac.new(signing_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def post(url: str, body: str, headers: dict[str, str], secret: str) -> str | None:
    """POST ``body`` as JSON; None on a 2xx answer, else why not (never ``secret``)."""
    try:
        response = httpx.post(
            url,
            content=body.encode(),
            headers={"content-type": "application/json", "user-agent": USER_AGENT, **headers},
            timeout=TIMEOUT_S,
            follow_redirects=False,
        )
    except httpx.HTTPError as exc:
        return failure(f"{type(exc).__name__}", secret)
    if response.is_success:
        return None
    return failure(f"HTTP {response.status_code} {response.reason_phrase}", secret)


class Webhook:
    def render(self, news: News, endpoint: Endpoint) -> str:
        return json.dumps(news.document(), separators=(",", ":"))

    def send(self, notification_id: str, body: str, endpoint: Endpoint) -> str | None:
        timestamp = int(time.time())
        headers = {
            "webhook-id": notification_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": sign(endpoint.secret, notification_id, timestamp, body),
        }
        return post(endpoint.target, body, headers, endpoint.secret)
