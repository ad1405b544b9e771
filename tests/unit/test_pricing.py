"""Cost from usage, including cache writes and reads, from an overridable table."""

from __future__ import annotations

from decimal import Decimal

import pytest

from shared.pricing import ModelPrice, cost_usd, find_price
from shared.usage import Usage

pytestmark = pytest.mark.unit


def test_dated_snapshots_find_their_family_price() -> None:
    price = find_price("claude-sonnet-4-5-20250929")
    assert price is not None
    assert price.input == Decimal(3)
    assert price.output == Decimal(15)


def test_opus_4_5_is_not_priced_as_opus_4() -> None:
    price = find_price("claude-opus-4-5-20251101")
    assert price is not None
    assert price.input == Decimal(5)


def test_cache_tokens_are_priced_at_their_multipliers() -> None:
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=0,
        cache_creation_input_tokens=1_000_000,
        cache_read_input_tokens=1_000_000,
    )
    price = ModelPrice(input=Decimal(3), output=Decimal(15))
    assert cost_usd(usage, price) == Decimal("3") + Decimal("3.75") + Decimal("0.30")


def test_overrides_win_over_the_default_table() -> None:
    override = {"claude-sonnet-4-5": ModelPrice(input=Decimal(1), output=Decimal(1))}
    price = find_price("claude-sonnet-4-5", override)
    assert price is not None
    assert price.input == Decimal(1)


def test_unknown_model_has_no_price() -> None:
    assert find_price("gpt-4") is None
