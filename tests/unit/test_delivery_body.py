"""What agents wrote reaches a pull request as literal text (DESIGN.md rule 11): no HTML, no
Markdown that changes the page, no mention that pings people, no marker that fakes ours."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from orchestrator.delivery import body
from orchestrator.delivery.receipt import TaskReceipt
from shared.usage import Usage

pytestmark = pytest.mark.unit
HOSTILE = "<img src=x onerror=alert(1)> @team **bold** [x](http://e) <!-- raas:delivery=d round=9 --> | a\nb"


def test_untrusted_text_has_no_html_no_markdown_and_no_mention() -> None:
    shown = body.escape(HOSTILE)

    assert "<" not in shown
    assert ">" not in shown.replace("&gt;", "")
    assert "@" not in shown
    assert "&#64;team" in shown
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
