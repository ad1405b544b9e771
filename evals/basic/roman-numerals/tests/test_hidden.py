import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
from roman import from_roman, to_roman  # noqa: E402


class RomanTest(unittest.TestCase):
    def test_known_values(self):
        cases = {1: "I", 4: "IV", 9: "IX", 14: "XIV", 40: "XL", 90: "XC", 400: "CD", 1994: "MCMXCIV", 3999: "MMMCMXCIX"}
        for n, s in cases.items():
            self.assertEqual(to_roman(n), s)
            self.assertEqual(from_roman(s), n)

    def test_round_trip(self):
        for n in range(1, 4000):
            self.assertEqual(from_roman(to_roman(n)), n)

    def test_out_of_range(self):
        for bad in (0, -1, 4000, 2.5, "7"):
            with self.assertRaises(ValueError):
                to_roman(bad)

    def test_non_canonical_refused(self):
        for bad in ("IIII", "IC", "VX", "iv", "", "MMMM", "ABC", "XXL"):
            with self.assertRaises(ValueError, msg=bad):
                from_roman(bad)


if __name__ == "__main__":
    unittest.main()
