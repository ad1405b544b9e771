"""The media a notification goes out by, one module each behind one interface (``base.Medium``),
chosen by the subscription's typed medium in one table."""

from __future__ import annotations

from orchestrator.notify.media.base import Endpoint, Medium
from orchestrator.notify.media.mail import Mail
from orchestrator.notify.media.slack import Slack
from orchestrator.notify.media.webhook import Webhook
from shared.models import NotificationMedium

MEDIA: dict[NotificationMedium, Medium] = {
    NotificationMedium.WEBHOOK: Webhook(),
    NotificationMedium.SLACK: Slack(),
    NotificationMedium.MAIL: Mail(),
}

__all__ = ["MEDIA", "Endpoint", "Medium"]
