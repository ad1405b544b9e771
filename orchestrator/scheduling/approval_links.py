"""Signed approval links, in the notification of ``approval_waiting``: decide an approval
without a session, once (the approval they name is decided once), until they expire."""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from shared.errors import Unauthorized
from shared.models import Approval, ApprovalStatus, utcnow
from shared.settings import Settings

# ``ID.ACTION.EXPIRES.SIGNATURE``,
# an HMAC-SHA256 over the first three with a key derived from the server's secret. A link works
# without a session; it is single use because the approval it names is decided once.
LINK_ACTIONS = ("approve", "reject")
LINK_BY = "signed link"
_FORGED = "this approval link is not valid (this server did not sign it); decide with `raas approve`"


@dataclass(frozen=True)
class LinkSigner:
    key: bytes
    ttl_s: float

    @classmethod
    def of(cls, settings: Settings) -> LinkSigner:
        secret = settings.approval_link_secret or settings.api_token
        key = hmac.new(secret.get_secret_value().encode(), b"raas-approval-link-v1", hashlib.sha256).digest()
        return cls(key, settings.approval_link_ttl_s)

    def _signature(self, payload: str) -> str:
        digest = hmac.new(self.key, payload.encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def sign(self, approval_id: str, action: str, expires: datetime) -> str:
        """The token of a link that ``action``s the approval until ``expires``."""
        payload = f"{approval_id}.{action}.{int(expires.timestamp())}"
        return f"{payload}.{self._signature(payload)}"

    def read(self, token: str, now: datetime) -> tuple[str, str]:
        """The approval id and the action a link's token signs.

        Raises:
            Unauthorized: the token is not one this server signed (forged, altered, cut), or expired.
        """
        parts = token.split(".")
        if len(parts) != 4 or parts[1] not in LINK_ACTIONS or not parts[2].isdigit():
            raise Unauthorized(_FORGED)
        approval_id, action, expires, signature = parts
        if not hmac.compare_digest(signature, self._signature(f"{approval_id}.{action}.{expires}")):
            raise Unauthorized(_FORGED)
        if int(expires) <= now.timestamp():
            msg = "this approval link has expired; decide in the dashboard's inbox or with `raas approve`"
            raise Unauthorized(msg)
        return approval_id, action

    def urls(self, session: Session, data: dict[str, Any], base_url: str) -> dict[str, str]:
        """``approve_url`` and ``reject_url`` of an approval_waiting event's approval, while it
        waits; none for one with a named approver list (a link names no one)."""
        approval = session.get(Approval, str(data.get("approval_id")))
        if approval is None or approval.status != ApprovalStatus.WAITING or approval.approvers:
            return {}
        expires = utcnow() + timedelta(seconds=self.ttl_s)
        root = f"{base_url.rstrip('/')}/approvals/link"
        return {f"{a}_url": f"{root}/{self.sign(approval.id, a, expires)}" for a in LINK_ACTIONS}
