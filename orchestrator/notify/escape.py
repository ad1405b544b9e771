"""Agent text made inert for each medium that shows it (DESIGN.md rule 11).

What agents write (a failure's reason, a pause message, a project's name) reaches people in
Slack and in mail. In Slack's mrkdwn ``&``, ``<`` and ``>`` are control characters (``<!here>``,
``<@U123>``, ``<url|text>``), and a bare ``@here`` or ``@channel`` may notify where names are
linked: escaping the three and putting a zero-width space after every ``@`` leaves nothing that
notifies or links. HTML mail gets ``html.escape``. Both flatten text to one bounded line where a
line is expected (a subject, a header), so nothing can start a header of its own.
"""

from __future__ import annotations

import html
import re

ZWSP = "\u200b"
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]+")


def one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (control characters and line breaks become spaces), cut at ``limit``."""
    flat = " ".join(_CONTROL.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def mrkdwn(text: str) -> str:
    """``text`` for a Slack mrkdwn field: shown as written, notifying and linking nothing."""
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return escaped.replace("@", "@" + ZWSP)


def mrkdwn_link(url: str, label: str) -> str:
    """A mrkdwn link to one of our own URLs (http or https only), its label escaped."""
    if not url.startswith(("http://", "https://")):
        return mrkdwn(label)
    target = url.replace("&", "&amp;").replace("<", "%3C").replace(">", "%3E").replace("|", "%7C")
    return f"<{target}|{mrkdwn(label).replace('|', '¦')}>"


def html_text(text: str) -> str:
    """``text`` for HTML: every character shown as written."""
    return html.escape(text, quote=True)
