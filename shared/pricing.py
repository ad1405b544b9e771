"""What a model's tokens cost, from a table users can override in raas.toml.

Prices are US dollars per million tokens. Cache writes cost 1.25x input and cache reads 0.1x
input unless a row says otherwise, matching Anthropic's published multipliers.
"""

from __future__ import annotations

from decimal import Decimal

from pydantic import BaseModel, ConfigDict, Field

from shared.usage import Usage

MILLION = Decimal(1_000_000)


class ModelPrice(BaseModel):
    """Prices of one model, in USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input: Decimal = Field(ge=0, description="USD per million uncached input tokens.")
    output: Decimal = Field(ge=0, description="USD per million output tokens.")
    cache_write: Decimal | None = Field(default=None, ge=0, description="Default: 1.25x input.")
    cache_read: Decimal | None = Field(default=None, ge=0, description="Default: 0.1x input.")

    def cache_write_price(self) -> Decimal:
        return self.cache_write if self.cache_write is not None else self.input * Decimal("1.25")

    def cache_read_price(self) -> Decimal:
        return self.cache_read if self.cache_read is not None else self.input * Decimal("0.1")


def _price(inp: str, out: str) -> ModelPrice:
    return ModelPrice(input=Decimal(inp), output=Decimal(out))


def _openai(inp: str, out: str, cached: str) -> ModelPrice:
    return ModelPrice(
        input=Decimal(inp), output=Decimal(out), cache_write=Decimal(inp), cache_read=Decimal(cached)
    )


# List prices from Anthropic's documentation; model ids match by prefix so that dated
# snapshots ("claude-sonnet-4-5-20250929") find their family.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "claude-opus-4-5": _price("5", "25"),
    "claude-opus-4-6": _price("5", "25"),
    "claude-opus-4-1": _price("15", "75"),
    "claude-opus-4": _price("15", "75"),
    "claude-sonnet-4-6": _price("3", "15"),
    "claude-sonnet-4-5": _price("3", "15"),
    "claude-sonnet-4": _price("3", "15"),
    "claude-haiku-4-5": _price("1", "5"),
    "claude-3-5-haiku": _price("0.8", "4"),
    # OpenAI's list prices, for Codex through the Responses API. OpenAI does not charge for
    # writing its cache, and reads it at the "cached input" price.
    "gpt-5": _openai("1.25", "10", "0.125"),
    # Codex 0.169.0's default here (the only gpt-5 family model it has metadata for, so it offers
    # apply_patch): gpt-5's list price, assumed; override it under [pricing] in raas.toml.
    "gpt-5.5": _openai("1.25", "10", "0.125"),
    "gpt-5-codex": _openai("1.25", "10", "0.125"),
    "gpt-5.1": _openai("1.25", "10", "0.125"),
    "gpt-5.1-codex": _openai("1.25", "10", "0.125"),
    "gpt-5-mini": _openai("0.25", "2", "0.025"),
    "gpt-5.1-codex-mini": _openai("0.25", "2", "0.025"),
    "gpt-5-nano": _openai("0.05", "0.4", "0.005"),
    "gpt-4.1": _openai("2", "8", "0.5"),
    "gpt-4.1-mini": _openai("0.4", "1.6", "0.1"),
    "o4-mini": _openai("1.1", "4.4", "0.275"),
    "codex-mini-latest": _openai("1.5", "6", "0.375"),
}


def find_price(model: str, overrides: dict[str, ModelPrice] | None = None) -> ModelPrice | None:
    """The price row for ``model``: an exact override first, then the longest matching prefix."""
    table = {**DEFAULT_PRICES, **(overrides or {})}
    if model in table:
        return table[model]
    matches = [key for key in table if model.startswith(key)]
    return table[max(matches, key=len)] if matches else None


def cost_usd(usage: Usage, price: ModelPrice) -> Decimal:
    """Dollars for one call's usage."""
    total = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_creation_input_tokens * price.cache_write_price()
        + usage.cache_read_input_tokens * price.cache_read_price()
    )
    return (total / MILLION).quantize(Decimal("0.000001"))
