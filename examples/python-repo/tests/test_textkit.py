import unittest

from textkit import title_slug


class TitleSlugTest(unittest.TestCase):
    def test_slug(self) -> None:
        assert title_slug("Hello, World!") == "hello-world"
