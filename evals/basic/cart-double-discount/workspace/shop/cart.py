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
        return sum((line_price(p, q, self.code) for p, q in self.lines), Decimal(0))

    def total(self):
        subtotal = self.subtotal()
        shipping = Decimal(0) if subtotal >= FREE_SHIPPING_FROM or not self.lines else SHIPPING
        discounted = subtotal * (1 - rate(self.code))
        return (discounted + shipping).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
