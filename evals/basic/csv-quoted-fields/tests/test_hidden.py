import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
from csvline import parse_line  # noqa: E402


class ParseLineTest(unittest.TestCase):
    def test_plain(self):
        self.assertEqual(parse_line("a,b,c"), ["a", "b", "c"])

    def test_quoted_comma(self):
        self.assertEqual(parse_line('1,"Smith, John",x'), ["1", "Smith, John", "x"])

    def test_escaped_quote(self):
        self.assertEqual(parse_line('"say ""hi""",2'), ['say "hi"', "2"])

    def test_empty_fields(self):
        self.assertEqual(parse_line(',,""'), ["", "", ""])

    def test_spaces_kept_in_unquoted(self):
        self.assertEqual(parse_line(" a , b"), [" a ", " b"])

    def test_unterminated_quote(self):
        with self.assertRaises(ValueError):
            parse_line('"open,field')

    def test_does_not_use_csv_module(self):
        with open("csvline.py", encoding="utf-8") as source:
            text = source.read()
        self.assertNotIn("import csv", text)


if __name__ == "__main__":
    unittest.main()
