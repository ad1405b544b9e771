import os
import subprocess
import sys
import tempfile
import unittest


class TodoTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.env = {**os.environ, "TODO_FILE": os.path.join(self.dir.name, "t.json")}

    def tearDown(self):
        self.dir.cleanup()

    def todo(self, *args):
        return subprocess.run([sys.executable, "-m", "todo", *args], capture_output=True, text=True, env=self.env)

    def test_add_list_done(self):
        self.todo("add", "buy", "milk")
        self.todo("add", "call", "bob")
        self.assertEqual(self.todo("done", "1").returncode, 0)
        self.assertEqual(self.todo("list").stdout, "[x] 1: buy milk\n[ ] 2: call bob\n")


if __name__ == "__main__":
    unittest.main()
