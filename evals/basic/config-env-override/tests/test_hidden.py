import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.getcwd())
from app.config import load_config  # noqa: E402
from app.errors import ConfigError  # noqa: E402


def ini(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".ini", delete=False)
    f.write(text)
    f.close()
    return f.name


class EnvOverrideTest(unittest.TestCase):
    def test_env_overrides_file_and_defaults(self):
        path = ini("[app]\nport = 9000\nhost = 0.0.0.0\n")
        try:
            settings = load_config(path, environ={"APP_PORT": "9100", "APP_WORKERS": "8"})
        finally:
            os.unlink(path)
        self.assertEqual(settings["port"], 9100)
        self.assertEqual(settings["workers"], 8)
        self.assertEqual(settings["host"], "0.0.0.0")

    def test_types(self):
        settings = load_config(environ={"APP_DEBUG": "Yes", "APP_TIMEOUT_S": "0.5", "APP_HOST": "example"})
        self.assertIs(settings["debug"], True)
        self.assertEqual(settings["timeout_s"], 0.5)
        self.assertEqual(settings["host"], "example")
        for text, value in (("1", True), ("on", True), ("OFF", False), ("no", False), ("0", False)):
            self.assertIs(load_config(environ={"APP_DEBUG": text})["debug"], value, text)

    def test_bad_value_names_the_variable(self):
        with self.assertRaises(ConfigError) as caught:
            load_config(environ={"APP_PORT": "eighty"})
        self.assertIn("APP_PORT", str(caught.exception))
        with self.assertRaises(ConfigError):
            load_config(environ={"APP_DEBUG": "maybe"})

    def test_unknown_and_unrelated_ignored(self):
        settings = load_config(environ={"APP_COLOR": "red", "PORT": "1", "HOME": "/x"})
        self.assertNotIn("color", settings)
        self.assertEqual(settings["port"], 8080)

    def test_os_environ_by_default(self):
        os.environ["APP_WORKERS"] = "16"
        try:
            self.assertEqual(load_config()["workers"], 16)
        finally:
            del os.environ["APP_WORKERS"]

    def test_file_booleans_still_work(self):
        path = ini("[app]\ndebug = true\n")
        try:
            self.assertIs(load_config(path, environ={})["debug"], True)
        finally:
            os.unlink(path)


if __name__ == "__main__":
    unittest.main()
