"""The pull request as the system writes it: title, body, receipt table, stop reason, link back.

What agents wrote is untrusted (DESIGN.md rule 11): every piece of it goes through
:func:`escape`, which leaves no HTML, no Markdown syntax, no @mention and no hidden comment, so a
summary can neither change how the page looks nor forge our markers. Our markers are HTML
comments the forge does not show: one names the project (in the body), one names a delivery's
round (in a comment), so a retried delivery finds what it already wrote.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal

from orchestrator.delivery.receipt import TaskReceipt
from shared.usage import Usage

_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
MAX_SUMMARY_CHARS = 1500
MAX_TITLE_CHARS = 120


def escape(text: str) -> str:
    """Untrusted text as literal Markdown: HTML entities for ``& < >`` and ``@``, backslashes for
    Markdown punctuation, control characters dropped."""
    text = _SPECIAL.sub(r"\\\1", _CONTROL.sub("", text))
    # After the backslashes: an entity's own '#' must stay as it is.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("@", "&#64;")


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
        return self.status != "completed"

    def line(self) -> str:
        if not self.early:
            return "**Completed**: every task is done."
        said = f": {escape(self.reason)}" if self.reason else ""
        kept = "What the agents wrote so far is on this branch."
        return f"**Stopped early** ({escape(self.status)}){said}. {kept}"


def title(project_name: str, receipts: list[TaskReceipt], ending: Ending) -> str:
    """Plain text (forges do not render titles): the project's name and its first task's summary."""
    first = next((r.summary for r in receipts if r.summary), None)
    text = project_name if first is None else f"{project_name}: {first.splitlines()[0]}"
    text = " ".join(_CONTROL.sub("", text).split())
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
