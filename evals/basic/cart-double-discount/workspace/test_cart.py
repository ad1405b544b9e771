import unittest
from decimal import Decimal

from shop.cart import Cart


class CartTest(unittest.TestCase):
    def test_no_code(self):
        cart = Cart()
        cart.add("10.00", 2)
        self.assertEqual(cart.total(), Decimal("24.99"))

    def test_empty(self):
        self.assertEqual(Cart().total(), Decimal("0.00"))


if __name__ == "__main__":
    unittest.main()
