"""Is a delivery from whom it says? Checked over the raw bytes, in constant time, before parsing.

- GitHub: ``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`` with the trigger's secret.
- GitLab: ``X-Gitlab-Token`` is the secret itself.
- A generic hook: Standard Webhooks (``webhook-id``, ``webhook-timestamp``, ``webhook-signature:
  v1,<base64 HMAC-SHA256 of "id.timestamp.body">``, several signatures separated by spaces); a
  timestamp more than ``TOLERANCE_S`` away from now is a replay and refused.

Every refusal is :class:`shared.errors.Unauthorized` with words that name the header, never the
secret or the signature sent.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime
from typing import NoReturn

from shared.errors import Unauthorized
from shared.models import TriggerSource

TOLERANCE_S = 300


def _refuse(reason: str) -> NoReturn:
    msg = f"delivery refused: {reason}"
    raise Unauthorized(msg)


def hmac_sha256(secret: str, data: bytes) -> bytes:
    return hmac.new(secret.encode(), data, hashlib.sha256).digest()


def verify_github(secret: str, headers: Mapping[str, str], body: bytes) -> None:
    sent = headers.get("x-hub-signature-256", "")
    if not sent.startswith("sha256="):
        _refuse("no X-Hub-Signature-256 (set the webhook's secret on GitHub)")
    expected = "sha256=" + hmac_sha256(secret, body).hex()
    if not hmac.compare_digest(sent.encode(), expected.encode()):
        _refuse("X-Hub-Signature-256 does not match the body")


def verify_gitlab(secret: str, headers: Mapping[str, str], body: bytes) -> None:
    del body  # GitLab signs nothing: the token is the secret itself
    sent = headers.get("x-gitlab-token", "")
    if not hmac.compare_digest(sent.encode(), secret.encode()):
        _refuse("X-Gitlab-Token is not the trigger's secret")


def verify_standard(secret: str, headers: Mapping[str, str], body: bytes, now: datetime) -> None:
    webhook_id, stamp = headers.get("webhook-id", ""), headers.get("webhook-timestamp", "")
    if not webhook_id or not stamp.isdigit():
        _refuse("no webhook-id and webhook-timestamp (Standard Webhooks)")
    if abs(now.timestamp() - int(stamp)) > TOLERANCE_S:
        _refuse(f"webhook-timestamp is more than {TOLERANCE_S} s from now (a replay?)")
    expected = base64.b64encode(hmac_sha256(secret, f"{webhook_id}.{stamp}.".encode() + body))
    for candidate in headers.get("webhook-signature", "").split():
        version, _, signature = candidate.partition(",")
        if version == "v1" and hmac.compare_digest(signature.encode(), expected):
            return
    _refuse("webhook-signature does not match (v1, HMAC-SHA256 of id.timestamp.body)")


def verify(
    source: TriggerSource, secret: str, headers: Mapping[str, str], body: bytes, now: datetime
) -> None:
    """Raises Unauthorized unless the delivery carries the trigger's secret or signature."""
    if source is TriggerSource.GITHUB:
        verify_github(secret, headers, body)
    elif source is TriggerSource.GITLAB:
        verify_gitlab(secret, headers, body)
    elif source is TriggerSource.WEBHOOK:
        verify_standard(secret, headers, body, now)
    else:
        _refuse("a schedule trigger takes no deliveries")
