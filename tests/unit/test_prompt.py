"""PROMPT.md's rules hold alike for a submitted project and for a new prompt of a running one."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.scheduling.prompt import MAX_PROMPT_BYTES, check_prompt, read_prompt
from shared.errors import InvalidInput

pytestmark = pytest.mark.unit

REFUSED = {
    "empty": (" \n\t", "is empty"),
    "nul": ("Do it.\x00", "contains a NUL byte"),
    "too large": ("x" * (MAX_PROMPT_BYTES + 1), "is larger than 256 KiB"),
    # The limit is in bytes, as on disk, not in characters.
    "too large in bytes": ("é" * (MAX_PROMPT_BYTES // 2 + 1), "is larger than 256 KiB"),
}


@pytest.mark.parametrize(("text", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_a_prompt_breaking_a_rule_is_refused_the_same_way_submitted_or_replaced(
    tmp_path: Path, text: str, message: str
) -> None:
    (tmp_path / "PROMPT.md").write_text(text, encoding="utf-8")
    with pytest.raises(InvalidInput, match=f"^PROMPT.md {message}"):
        read_prompt(tmp_path)
    with pytest.raises(InvalidInput, match=f"^the new PROMPT.md {message}"):
        check_prompt(text, "the new PROMPT.md")


def test_a_prompt_at_the_limit_is_accepted(tmp_path: Path) -> None:
    text = "x" * MAX_PROMPT_BYTES
    (tmp_path / "PROMPT.md").write_text(text, encoding="utf-8")
    assert read_prompt(tmp_path) == text
    check_prompt(text)


def test_a_directory_without_prompt_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="no PROMPT.md at its top level"):
        read_prompt(tmp_path)
