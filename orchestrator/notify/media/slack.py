"""A Slack incoming webhook: one Block Kit message with the status, the cost, the diff's size and
the links to the pull request and the dashboard.

Every text an agent or a user wrote goes through :func:`escape.mrkdwn` (the fallback ``text``
too, which notifications show): it can neither notify (``<!channel>``, ``<!here>``, ``<@U…>``,
``@here``) nor link. The incoming webhook's URL is the subscription's secret: it is never in a
failure's words.
"""

from __future__ import annotations

import json
from typing import Any

from orchestrator.notify.escape import mrkdwn, mrkdwn_link, one_line
from orchestrator.notify.media.base import Endpoint
from orchestrator.notify.media.webhook import post
from orchestrator.notify.news import News

# Slack's limits: a section's text 3,000 characters, a field's 2,000.
REASON_CHARS = 2_000


def _mrkdwn(text: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": text}


class Slack:
    def render(self, news: News, endpoint: Endpoint) -> str:
        headline = mrkdwn(one_line(news.headline, 150))
        fields = [
            _mrkdwn(f"*Status*\n{mrkdwn(news.status)}"),
            _mrkdwn(f"*Cost*\n{news.cost}"),
        ]
        if news.diff_stat:
            fields.append(_mrkdwn(f"*Changes*\n{mrkdwn(news.diff_stat)}"))
        blocks: list[dict[str, Any]] = [
            {"type": "section", "text": _mrkdwn(f"*{headline}*")},
            {"type": "section", "fields": fields},
        ]
        if news.reason:
            blocks.append({"type": "section", "text": _mrkdwn(mrkdwn(news.reason[:REASON_CHARS]))})
        links = [
            mrkdwn_link(url, label)
            for url, label in (
                (news.pull_request_url, "Pull request"),
                (news.dashboard_url, "Dashboard"),
                (news.approve_url, "Approve"),
                (news.reject_url, "Reject"),
            )
            if url
        ]
        if links:
            blocks.append({"type": "context", "elements": [_mrkdwn(" · ".join(links))]})
        fallback = f"{headline} ({news.cost})"
        return json.dumps({"text": fallback, "blocks": blocks, "unfurl_links": False}, ensure_ascii=False)

    def send(self, notification_id: str, body: str, endpoint: Endpoint) -> str | None:
        return post(endpoint.secret, body, {}, endpoint.secret)
