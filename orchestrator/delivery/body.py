"""The pull request as the system writes it: title, body, receipt table, stop reason, link back.

What agents wrote is untrusted (DESIGN.md rule 11): every piece of it goes through
:func:`escape`, which leaves no HTML, no Markdown syntax and no hidden comment, so a summary can
neither change how the page looks nor forge our markers. Nor can it reach anyone: the forge finds
mentions (``@name``) and references (``#12``, ``GH-12``, a commit's SHA) in the *rendered* text, so
an entity (``&#64;``) would render back to a live ``@name``; a zero-width space after the ``@``, the
``#`` or the ``GH-`` and every 6 digits of a SHA breaks them the way Dependabot and Renovate do, and
the reader sees the same text. The title is plain text: :func:`defuse` puts the same spaces in it.

Our markers are HTML comments the forge does not show: one names the project (in the body), one
names a delivery's round (in a comment), so a retried delivery finds what it already wrote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from orchestrator.delivery.receipt import TaskReceipt
from shared.usage import Usage

# A commit's SHA (or its prefix) as the forge links it: 7 or more hex digits standing alone.
_SHA = r"(?<![0-9A-Za-z])[0-9A-Fa-f]{7,}(?![0-9A-Za-z])"
# GitHub links "GH-12" as it does "#12".
_GH = r"(?<![0-9A-Za-z])[Gg][Hh]-(?=[0-9])"
_MARKDOWN = re.compile(rf"{_SHA}|{_GH}|[\\`*_{{}}\[\]()#+\-.!|~&<>@]")
_PLAIN = re.compile(rf"{_SHA}|{_GH}|[#@]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "@": "&#64;"}
ZERO_WIDTH_SPACE = "\u200b"
MAX_SUMMARY_CHARS = 1500
MAX_TITLE_CHARS = 120


def _pieces(token: str) -> list[str]:
    """A mention, a reference or a SHA cut where a zero-width space unmakes it: after the ``@``, the
    ``#`` or the ``GH-``; a SHA into runs of 6, each too short to be a SHA on its own."""
    if token[-1] in "@#-":
        return [token, ""]
    return [token[i : i + 6] for i in range(0, len(token), 6)]


def _markdown(match: re.Match[str]) -> str:
    token = match.group()
    if len(token) == 1 and token not in "@#":
        return _ENTITIES.get(token) or f"\\{token}"
    head, *tail = _pieces(token)
    head = _ENTITIES.get(head) or head.replace("#", "\\#").replace("-", "\\-")
    return "&#8203;".join([head, *tail])


def escape(text: str) -> str:
    """Untrusted text as literal Markdown that mentions and links nothing once rendered: HTML entities
    for ``& < >`` and ``@``, backslashes for Markdown punctuation, a zero-width space (``&#8203;``)
    after ``@``, ``#`` and ``GH-`` and every 6 digits of a SHA, control characters dropped."""
    return _MARKDOWN.sub(_markdown, _CONTROL.sub("", text))


def defuse(text: str) -> str:
    """Plain text (a title) that mentions and links nothing: a zero-width space after ``@``, ``#`` and
    ``GH-`` and every 6 digits of a SHA."""
    return _PLAIN.sub(lambda m: ZERO_WIDTH_SPACE.join(_pieces(m.group())), text)


def _cell(text: str) -> str:
    """Escaped, on one line (a table cell)."""
    return escape(" ".join(text.split()))


def body_marker(project_id: str) -> str:
    return f"<!-- raas:project={project_id} -->"


def round_marker(delivery_id: str, round_: int) -> str:
    return f"<!-- raas:delivery={delivery_id} round={round_} -->"


@dataclass(frozen=True)
class Ending:
    """How the run ended: the project's status and its reason in words."""

    status: str
    reason: str | None

    @property
    def early(self) -> bool:
        return self.status not in ("completed", "delivered")  # delivered: a PR round's end

    def line(self) -> str:
        if self.status == "delivered" and self.reason:  # a followed pull request: why it ended
            return f"**Completed**: every task is done. {escape(self.reason)}."
        if not self.early:
            return "**Completed**: every task is done."
        said = f": {escape(self.reason)}" if self.reason else ""
        kept = "What the agents wrote so far is on this branch."
        return f"**Stopped early** ({escape(self.status)}){said}. {kept}"


def title(project_name: str, receipts: list[TaskReceipt], ending: Ending) -> str:
    """Plain text (forges do not render titles): the project's name and its first task's summary."""
    first = next((r.summary for r in receipts if r.summary), None)
    text = project_name if first is None else f"{project_name}: {first.splitlines()[0]}"
    text = " ".join(defuse(_CONTROL.sub("", text)).split())
    if ending.early:
        text = f"[{ending.status}] {text}"
    return text if len(text) <= MAX_TITLE_CHARS else text[: MAX_TITLE_CHARS - 1] + "…"


def _duration(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def _money(amount: Decimal) -> str:
    return f"${amount:.4f}"


def receipt_table(receipts: list[TaskReceipt]) -> str:
    rows = [
        "| task | status | iterations | input | output | cache write | cache read | cost | duration "
        "| validator |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in receipts:
        counts = " | ".join(str(n) for n in r.tokens.counts())
        rows.append(
            f"| {_cell(r.key)} | {r.status} | {r.iterations} | {counts} | {_money(r.cost_usd)} | "
            f"{_duration(r.duration_s)} | {r.validator} |"
        )
    if receipts:
        total_tokens = sum((r.tokens for r in receipts), start=Usage())
        counts = " | ".join(str(n) for n in total_tokens.counts())
        cost = sum((r.cost_usd for r in receipts), start=Decimal(0))
        rows.append(
            f"| **total** | | {sum(r.iterations for r in receipts)} | {counts} | {_money(cost)} | "
            f"{_duration(sum(r.duration_s for r in receipts))} | |"
        )
    return "\n".join(rows)


def body(project_id: str, project_name: str, receipts: list[TaskReceipt], ending: Ending, link: str) -> str:
    parts = [body_marker(project_id), f"## {escape(project_name)}", "", ending.line(), "", "### Tasks", ""]
    for r in receipts:
        summary = (r.summary or "(no summary)")[:MAX_SUMMARY_CHARS]
        parts.append(f"- **{escape(r.key)}** ({r.status}): {escape(r.title)}")
        parts.extend(f"  > {escape(line)}" if line.strip() else "  >" for line in summary.splitlines())
    parts += ["", "### Receipt", "", receipt_table(receipts), "", f"Opened by Constellation. {link}"]
    return "\n".join(parts)


STILL_DRAFT = (
    "It is still a draft: this forge's REST API cannot mark it ready for review (GitHub's needs "
    "GraphQL), so mark it ready yourself once you have looked at it."
)


def round_comment(
    delivery_id: str,
    round_: int,
    ending: Ending,
    receipts: list[TaskReceipt],
    link: str,
    *,
    still_draft: bool = False,
) -> str:
    """What a later round says on the open pull request: why the run ended this time, the receipt,
    and (``still_draft``) that the draft could not be marked ready though the run completed."""
    lines = [round_marker(delivery_id, round_), ending.line()]
    if still_draft:
        lines.append(STILL_DRAFT)
    return "\n".join([*lines, "", receipt_table(receipts), "", link])


def link_back(project_id: str, coordinator_url: str) -> str:
    return (
        f"Follow it with `raas status {project_id}` ({coordinator_url.rstrip('/')}/v1/projects/{project_id})."
    )
