"""Mail over SMTP (the standard library's ``smtplib`` and ``email``): plain text and HTML.

The subscription's options name the server (host, port, username, sender, tls: ``starttls``,
``ssl``, or ``none``, allowed on loopback only); its secret is the SMTP password. The message's
``Message-ID`` is the notification's id, so a repeated attempt is recognisably the same message.
Agent text is HTML-escaped in the HTML part, and flattened to one line in the subject.
"""

from __future__ import annotations

import smtplib
import ssl
from datetime import datetime
from email.message import EmailMessage
from email.policy import SMTP
from email.utils import format_datetime, getaddresses

from orchestrator.notify.escape import html_text, one_line
from orchestrator.notify.media.base import TIMEOUT_S, Endpoint, failure
from orchestrator.notify.news import News
from shared.models import utcnow


def recipients(target: str) -> list[str]:
    return [address for _name, address in getaddresses([target]) if address]


def _lines(news: News) -> list[tuple[str, str]]:
    lines = [("Status", news.status), ("Cost", news.cost)]
    if news.diff_stat:
        lines.append(("Changes", news.diff_stat))
    if news.reason:
        lines.append(("Reason", news.reason))
    return lines


def _links(news: News) -> list[tuple[str, str]]:
    pairs = (
        ("Pull request", news.pull_request_url),
        ("Dashboard", news.dashboard_url),
        ("Approve", news.approve_url),
        ("Reject", news.reject_url),
    )
    return [(label, url) for label, url in pairs if url and url.startswith(("http://", "https://"))]


def _html(news: News) -> str:
    rows = "".join(
        f"<tr><th align=left>{html_text(k)}</th><td>{html_text(v)}</td></tr>" for k, v in _lines(news)
    )
    links = " · ".join(f'<a href="{html_text(url)}">{html_text(label)}</a>' for label, url in _links(news))
    return f"<html><body><h2>{html_text(news.headline)}</h2><table>{rows}</table><p>{links}</p></body></html>"


class Mail:
    def render(self, news: News, endpoint: Endpoint) -> str:
        message = EmailMessage(policy=SMTP)
        sender = str(endpoint.options["sender"])
        message["Subject"] = "[raas] " + one_line(news.headline, 150)
        message["From"] = sender
        message["To"] = ", ".join(recipients(endpoint.target))
        message["Message-ID"] = f"<{news.id}@{sender.rpartition('@')[2] or 'raas'}>"
        message["Date"] = format_datetime(_moment(news.ts))
        text = [news.headline, ""] + [f"{k}: {v}" for k, v in _lines(news)]
        text += [""] + [f"{label}: {url}" for label, url in _links(news)]
        message.set_content("\n".join(text) + "\n", cte="quoted-printable")
        message.add_alternative(_html(news), subtype="html", cte="quoted-printable")
        return message.as_string()

    def send(self, notification_id: str, body: str, endpoint: Endpoint) -> str | None:
        options = endpoint.options
        host, port, tls = str(options["host"]), int(options["port"]), str(options["tls"])
        try:
            smtp: smtplib.SMTP
            if tls == "ssl":
                smtp = smtplib.SMTP_SSL(host, port, timeout=TIMEOUT_S, context=ssl.create_default_context())
            else:
                smtp = smtplib.SMTP(host, port, timeout=TIMEOUT_S)
            with smtp:
                if tls == "starttls":
                    smtp.starttls(context=ssl.create_default_context())
                smtp.login(str(options["username"]), endpoint.secret)
                smtp.sendmail(str(options["sender"]), recipients(endpoint.target), body.encode())
        except (smtplib.SMTPException, OSError) as exc:
            return failure(f"SMTP {type(exc).__name__}: {exc}", endpoint.secret)
        return None


def _moment(iso: str) -> datetime:
    try:
        return datetime.fromisoformat(iso)
    except ValueError:
        return utcnow()
