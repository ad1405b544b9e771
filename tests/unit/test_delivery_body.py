"""What agents wrote reaches a pull request as literal text (DESIGN.md rule 11): no HTML, no
Markdown that changes the page, no mention that pings people, no marker that fakes ours."""

from __future__ import annotations

import re
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from orchestrator.delivery import body
from orchestrator.delivery.receipt import TaskReceipt
from shared.usage import Usage

pytestmark = pytest.mark.unit
HOSTILE = "<img src=x onerror=alert(1)> @team **bold** [x](http://e) <!-- raas:delivery=d round=9 --> | a\nb"
# What the forge links once rendered: a mention, an issue or PR reference, a commit's SHA.
LIVE = re.compile(r"@[A-Za-z0-9]|#[0-9]|\bGH-[0-9]|\b[0-9a-f]{7,40}\b", re.IGNORECASE)
REFERENCES = (
    "@someone please review, fixes #123 and GH-7 (org/repo#9), reverts deadbeef12 and 1a2b3c4 "
    "by user@abcdef0; \\#5 @@x #\n#4 heading"
)


class _TextOutsideCode(HTMLParser):
    """The rendered page's text as the forge's mention and reference filters see it: code is skipped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self._in_code = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        self._in_code += tag in ("code", "pre")

    def handle_endtag(self, tag: str) -> None:
        self._in_code -= tag in ("code", "pre")

    def handle_data(self, data: str) -> None:
        if not self._in_code:
            self.text.append(data)


def rendered_text(markdown: str) -> str:
    html = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)
    parser = _TextOutsideCode()
    parser.feed(html)
    return " ".join(parser.text)


def test_untrusted_text_has_no_html_no_markdown_and_no_mention() -> None:
    shown = body.escape(HOSTILE)

    assert "<" not in shown
    assert ">" not in shown.replace("&gt;", "")
    assert "@" not in shown
    assert "&#64;&#8203;team" in shown
    assert "\\*\\*bold\\*\\*" in shown
    assert "\\[x\\]\\(http://e\\)" in shown


def test_a_summary_cannot_forge_a_marker_or_break_the_receipt_table() -> None:
    receipt = TaskReceipt(key=HOSTILE, title=HOSTILE, status="completed", iterations=2, summary=HOSTILE)
    receipt.tokens, receipt.cost_usd = Usage(input_tokens=5), Decimal("0.5")
    receipts = [receipt]
    ending = body.Ending("stopped", HOSTILE)

    text = body.body("p1", "name", receipts, ending, "link")

    assert text.count("<!--") == 1  # ours, the project's marker
    assert body.round_marker("d", 9) not in text
    table = body.receipt_table(receipts)
    assert len(table.splitlines()) == 4  # header, rule, the task, the total: the newline did not split a row
    # Every row has the header's ten cells: an escaped pipe is not a column
    assert {len(re.split(r"(?<!\\)\|", row)) for row in table.splitlines()} == {12}


def test_mentions_references_and_shas_an_agent_writes_link_nothing_once_rendered() -> None:
    # Given a task whose agent names people, issues and commits in its title, summary and reason
    receipt = TaskReceipt(key="fix-#1", title=REFERENCES, status="completed", summary=REFERENCES)
    ending = body.Ending("failed", REFERENCES)
    assert LIVE.search(rendered_text(REFERENCES))  # rendered as written, they would link

    # When the pull request's body, a later round's comment and its title are written
    description = body.body("p1", "@owner #1 name", [receipt], ending, "link")
    comment = body.round_comment("d", 2, ending, [receipt], "link")
    heading = body.title("@owner #1 name", [receipt], ending)

    # Then the rendered text reads the same but no mention, reference or SHA survives in it
    for markdown in (description, comment):
        shown = rendered_text(markdown)
        assert not LIVE.search(shown), LIVE.search(shown)
        assert "please review, fixes #\u200b123" in shown.replace("@\u200bsomeone ", "")
    assert not LIVE.search(heading)  # a title is plain text: no entities, the zero-width space itself
    assert heading.replace(body.ZERO_WIDTH_SPACE, "").startswith("[failed] @owner #1 name: @someone")
    assert "&#" not in heading


def test_the_receipts_numbers_and_our_marker_are_left_as_they_are() -> None:
    receipt = TaskReceipt(key="api", title="t", status="completed", iterations=12345678)
    text = body.body("0123456789abcdef", "name", [receipt], body.Ending("completed", None), "link")

    assert "| 12345678 |" in text  # the receipt's own numbers are ours, not an agent's
    assert "<!-- raas:project=0123456789abcdef -->" in text
