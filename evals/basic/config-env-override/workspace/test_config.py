import os
import tempfile
import unittest

from app.config import load_config
from app.errors import ConfigError


class FileTest(unittest.TestCase):
    def test_defaults(self):
        self.assertEqual(load_config()["port"], 8080)

    def test_file_values(self):
        with tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False) as f:
            f.write("[app]\nport = 9000\ndebug = true\n")
        try:
            settings = load_config(f.name)
        finally:
            os.unlink(f.name)
        self.assertEqual((settings["port"], settings["debug"]), (9000, True))

    def test_missing_file(self):
        with self.assertRaises(ConfigError):
            load_config("/nonexistent.ini")


if __name__ == "__main__":
    unittest.main()
