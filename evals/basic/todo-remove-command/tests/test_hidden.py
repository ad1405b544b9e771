import os
import subprocess
import sys
import tempfile
import unittest

WORKSPACE = os.getcwd()


class TodoHiddenTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.env = {**os.environ, "TODO_FILE": os.path.join(self.dir.name, "t.json"), "PYTHONPATH": WORKSPACE}

    def tearDown(self):
        self.dir.cleanup()

    def todo(self, *args):
        return subprocess.run(
            [sys.executable, "-B", "-m", "todo", *args], capture_output=True, text=True, env=self.env, cwd=self.dir.name
        )

    def test_remove_keeps_other_ids_and_never_reuses(self):
        for text in ("a", "b", "c"):
            self.todo("add", text)
        self.assertEqual(self.todo("remove", "2").returncode, 0)
        self.assertEqual(self.todo("list").stdout, "[ ] 1: a\n[ ] 3: c\n")
        self.assertEqual(self.todo("add", "d").stdout, "added 4\n")
        self.assertEqual(self.todo("remove", "3").returncode, 0)
        self.assertEqual(self.todo("add", "e").stdout, "added 5\n")

    def test_remove_unknown(self):
        self.todo("add", "a")
        result = self.todo("remove", "9")
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.strip(), "todo: no item 9")

    def test_list_pending(self):
        for text in ("a", "b", "c"):
            self.todo("add", text)
        self.todo("done", "2")
        self.assertEqual(self.todo("list", "--pending").stdout, "[ ] 1: a\n[ ] 3: c\n")
        self.assertEqual(self.todo("list").stdout, "[ ] 1: a\n[x] 2: b\n[ ] 3: c\n")

    def test_default_file_in_cwd(self):
        env = dict(self.env)
        del env["TODO_FILE"]
        subprocess.run([sys.executable, "-B", "-m", "todo", "add", "x"], env=env, cwd=self.dir.name, check=True)
        self.assertTrue(os.path.exists(os.path.join(self.dir.name, "todo.json")))


if __name__ == "__main__":
    unittest.main()
