import os
import sys
import unittest
from decimal import Decimal

sys.path.insert(0, os.getcwd())
from shop.cart import Cart  # noqa: E402
from shop.pricing import line_price  # noqa: E402


def cart(code, *lines):
    c = Cart(code)
    for price, quantity in lines:
        c.add(price, quantity)
    return c


class CheckoutTest(unittest.TestCase):
    def test_discount_applied_once(self):
        self.assertEqual(cart("SAVE10", ("100.00", 1)).total(), Decimal("90.00"))

    def test_shipping_on_discounted_subtotal(self):
        # 52.00 - 50% = 26.00 < 50: shipping is charged
        self.assertEqual(cart("HALF", ("26.00", 2)).total(), Decimal("30.99"))

    def test_free_shipping_at_threshold(self):
        self.assertEqual(cart(None, ("25.00", 2)).total(), Decimal("50.00"))

    def test_rounding_half_up(self):
        # 3 x 0.35 = 1.05, -10% = 0.945 -> 0.95 (+4.99)
        self.assertEqual(cart("SAVE10", ("0.35", 3)).total(), Decimal("5.94"))

    def test_subtotal_is_before_discount_or_after_once(self):
        c = cart("SAVE10", ("100.00", 1))
        self.assertIn(c.subtotal(), (Decimal("100.00"), Decimal("90.00")))

    def test_no_code_unchanged(self):
        self.assertEqual(cart(None, ("10.00", 2)).total(), Decimal("24.99"))
        self.assertEqual(Cart().total(), Decimal("0.00"))

    def test_unknown_code(self):
        with self.assertRaises(KeyError):
            cart("NOPE", ("1.00", 1)).total()

    def test_line_price_still_callable(self):
        self.assertEqual(line_price("2.50", 2), Decimal("5.00"))


if __name__ == "__main__":
    unittest.main()
