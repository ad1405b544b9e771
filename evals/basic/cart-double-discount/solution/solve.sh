#!/usr/bin/env bash
set -eu
cat > shop/pricing.py <<'PY'
"""Prices of cart lines."""

from decimal import Decimal


def line_price(unit_price, quantity):
    """The price of one cart line, before any discount (the cart applies the code once)."""
    return Decimal(unit_price) * quantity
PY
cat > shop/cart.py <<'PY'
"""The cart and its total."""

from decimal import ROUND_HALF_UP, Decimal

from shop.codes import rate
from shop.pricing import line_price

SHIPPING = Decimal("4.99")
FREE_SHIPPING_FROM = Decimal("50.00")


class Cart:
    def __init__(self, code=None):
        self.code = code
        self.lines = []

    def add(self, unit_price, quantity=1):
        self.lines.append((Decimal(unit_price), quantity))

    def subtotal(self):
        return sum((line_price(p, q) for p, q in self.lines), Decimal(0))

    def total(self):
        discounted = self.subtotal() * (1 - rate(self.code))
        shipping = Decimal(0) if discounted >= FREE_SHIPPING_FROM or not self.lines else SHIPPING
        cents = Decimal("0.01")
        return (discounted.quantize(cents, rounding=ROUND_HALF_UP) + shipping).quantize(cents)
PY
