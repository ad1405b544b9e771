import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
from stats import mean, median  # noqa: E402


class MedianTest(unittest.TestCase):
    def test_odd_unsorted(self):
        self.assertEqual(median([3, 1, 2]), 2)

    def test_even_is_mean_of_middle_two(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_single(self):
        self.assertEqual(median([7]), 7)

    def test_input_not_changed(self):
        values = [3, 1, 2]
        median(values)
        self.assertEqual(values, [3, 1, 2])

    def test_empty_raises(self):
        with self.assertRaises(ValueError):
            median([])

    def test_mean_still_works(self):
        self.assertEqual(mean([1, 2, 3]), 2)


if __name__ == "__main__":
    unittest.main()
