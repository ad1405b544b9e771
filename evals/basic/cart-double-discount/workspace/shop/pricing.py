"""Prices of cart lines."""

from decimal import Decimal

from shop.codes import rate


def line_price(unit_price, quantity, code=None):
    """The price of one cart line."""
    return Decimal(unit_price) * quantity * (1 - rate(code))
