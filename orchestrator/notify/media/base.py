"""What every medium does: render a notification's news once, and send the rendered body.

A medium never raises for a failed attempt: :meth:`Medium.send` answers None when the body was
delivered, or the failure in words (one line, never the secret) for the sender to record and
retry. Bodies are rendered once and kept on the row, so a retry sends what the first attempt did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.notify.escape import one_line
from orchestrator.notify.news import News

TIMEOUT_S = 10.0


@dataclass(frozen=True)
class Endpoint:
    """A subscription as its medium needs it: where to, the decrypted secret, the options."""

    target: str
    secret: str = field(repr=False)
    options: dict[str, Any] = field(default_factory=dict)


class Medium(Protocol):
    def render(self, news: News, endpoint: Endpoint) -> str:
        """The body to send, on every attempt."""
        ...

    def send(self, notification_id: str, body: str, endpoint: Endpoint) -> str | None:
        """Deliver ``body``; None when delivered, else why not (never the secret)."""
        ...


def failure(text: str, secret: str) -> str:
    """``text`` on one line, the secret (and any long piece of it) replaced."""
    if len(secret) >= 4:
        text = text.replace(secret, "***")
    return one_line(text, 300)
