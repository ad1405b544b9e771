import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
from text import slugify  # noqa: E402


class SlugifyTest(unittest.TestCase):
    def test_spaces_and_punctuation_collapse_to_one_dash(self):
        self.assertEqual(slugify("  Hello,   World!  "), "hello-world")

    def test_accents_keep_their_base_letter(self):
        self.assertEqual(slugify("Crème brûlée"), "creme-brulee")

    def test_digits_stay(self):
        self.assertEqual(slugify("Top 10 -- Tips"), "top-10-tips")

    def test_nothing_left_is_empty(self):
        self.assertEqual(slugify("!!! ???"), "")

    def test_already_a_slug(self):
        self.assertEqual(slugify("already-a-slug"), "already-a-slug")


if __name__ == "__main__":
    unittest.main()
