import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
from intervals import merge  # noqa: E402


class MergeTest(unittest.TestCase):
    def test_touching(self):
        self.assertEqual(merge([(1, 2), (2, 3)]), [(1, 3)])

    def test_unsorted(self):
        self.assertEqual(merge([(8, 10), (1, 3), (2, 6), (15, 18)]), [(1, 6), (8, 10), (15, 18)])

    def test_contained(self):
        self.assertEqual(merge([(1, 10), (2, 3), (4, 5)]), [(1, 10)])

    def test_empty(self):
        self.assertEqual(merge([]), [])

    def test_input_kept(self):
        given = [(5, 6), (1, 2)]
        merge(given)
        self.assertEqual(given, [(5, 6), (1, 2)])


if __name__ == "__main__":
    unittest.main()
