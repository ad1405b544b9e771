import os
import subprocess
import tempfile
import unittest

SCRIPT = os.path.join(os.getcwd(), "rotate.sh")
NAMES = [f"backup-2024010{d}-12000{d}.tar.gz" for d in range(1, 7)]


def run(*args):
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True)


class RotateTest(unittest.TestCase):
    def make(self, parent):
        path = os.path.join(parent, "my backups")
        os.mkdir(path)
        for name in NAMES + ["notes.txt", "backup-keep-me.txt"]:
            with open(os.path.join(path, name), "w") as file:
                file.write(name)
        return path

    def test_keeps_the_newest(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = self.make(tmp)
            result = run(path, "2")
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertEqual(sorted(os.listdir(path)), sorted(NAMES[-2:] + ["notes.txt", "backup-keep-me.txt"]))

    def test_keep_zero_removes_every_backup(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = self.make(tmp)
            self.assertEqual(run(path, "0").returncode, 0)
            self.assertEqual(sorted(os.listdir(path)), ["backup-keep-me.txt", "notes.txt"])

    def test_keep_more_than_there_are(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = self.make(tmp)
            self.assertEqual(run(path, "10").returncode, 0)
            self.assertEqual(len(os.listdir(path)), len(NAMES) + 2)

    def test_bad_keep_deletes_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = self.make(tmp)
            for bad in ("-1", "two", ""):
                result = run(path, bad)
                self.assertEqual(result.returncode, 2, bad)
                self.assertTrue(result.stderr.strip(), bad)
            self.assertEqual(len(os.listdir(path)), len(NAMES) + 2)


if __name__ == "__main__":
    unittest.main()
