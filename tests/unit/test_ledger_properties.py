"""The budget's pure rules (DESIGN.md rule 1): a call's worst case covers whatever it can cost,
and a lowered output limit is the largest the remainder pays. What the database holds under any
interleaving of calls is tests/integration/test_ledger.py's, on SQLite and Postgres alike.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared import budget
from shared.pricing import ModelPrice, cost_usd
from shared.usage import Usage

pytestmark = pytest.mark.unit

PRICE = st.decimals(min_value=0, max_value=100, places=2)


@st.composite
def prices(draw: st.DrawFn) -> ModelPrice:
    """Any price row whose cache reads cost no more than input or cache writes (as every real one)."""
    price = ModelPrice(input=draw(PRICE), output=draw(PRICE), cache_write=draw(st.none() | PRICE))
    ceiling = max(price.input, price.cache_write_price())
    read = draw(st.none() | st.decimals(min_value=0, max_value=ceiling, places=2))
    return price.model_copy(update={"cache_read": read})


@settings(max_examples=300, deadline=None)
@given(
    price=prices(),
    split=st.tuples(st.integers(0, 200_000), st.integers(0, 200_000), st.integers(0, 200_000)),
    max_output=st.integers(1, 64_000),
    used_output=st.integers(0, 64_000),
)
def test_no_call_within_its_limits_costs_more_than_its_estimate(
    price: ModelPrice, split: tuple[int, int, int], max_output: int, used_output: int
) -> None:
    # Given a call whose input is split any way between plain, cache-written and cache-read
    # tokens, and whose output is at most max_tokens
    plain, written, read = split
    usage = Usage(
        input_tokens=plain,
        cache_creation_input_tokens=written,
        cache_read_input_tokens=read,
        output_tokens=min(used_output, max_output),
    )
    # Then what it costs is at most what was reserved for it
    assert cost_usd(usage, price) <= budget.call_estimate_usd(price, plain + written + read, max_output)


# Defects found by these properties, fixed, and kept as tests.


def test_an_estimate_covers_a_call_whose_cache_reads_are_priced_above_input() -> None:
    price = ModelPrice(input=Decimal(0), output=Decimal(0), cache_read=Decimal("0.01"))
    usage = Usage(cache_read_input_tokens=51)
    assert cost_usd(usage, price) <= budget.call_estimate_usd(price, 51, 1)


@settings(max_examples=300, deadline=None)
@given(
    price=prices(),
    tokens=st.integers(0, 500_000),
    asked=st.integers(1, 128_000),
    affordable=st.decimals(Decimal(0), Decimal(20), places=6),
)
def test_the_output_that_fits_is_the_largest_whose_worst_case_is_paid(
    price: ModelPrice, tokens: int, asked: int, affordable: Decimal
) -> None:
    fits = budget.output_that_fits(price, tokens, asked, affordable)
    assert 0 <= fits <= asked
    if fits:
        assert budget.call_estimate_usd(price, tokens, fits) <= affordable
    if fits < asked:
        assert budget.call_estimate_usd(price, tokens, fits + 1) > affordable
