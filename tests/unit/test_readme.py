"""The README's configuration reference is exactly what the models say."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config_reference import BEGIN, END, reference

pytestmark = pytest.mark.unit
README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_configuration_reference_matches_the_models() -> None:
    text = README.read_text(encoding="utf-8")
    start, stop = text.index(BEGIN), text.index(END) + len(END)
    hint = "regenerate it: python -m shared.config_reference --write README.md"
    assert text[start:stop] == reference(), hint
