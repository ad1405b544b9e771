"""Discount codes."""

from decimal import Decimal

CODES = {"SAVE10": Decimal("0.10"), "HALF": Decimal("0.50")}


def rate(code):
    """The fraction a code takes off, 0 for no code; an unknown code raises KeyError."""
    if code is None:
        return Decimal(0)
    return CODES[code]
