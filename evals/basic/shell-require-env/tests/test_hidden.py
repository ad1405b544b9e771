import os
import subprocess
import unittest

SCRIPT = os.path.join(os.getcwd(), "require_env.sh")


def run(args, env):
    base = {"PATH": os.environ["PATH"]}
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env={**base, **env})


class RequireEnvTest(unittest.TestCase):
    def test_all_set(self):
        result = run(["A", "B"], {"A": "1", "B": "x y"})
        self.assertEqual((result.returncode, result.stdout, result.stderr), (0, "", ""))

    def test_missing_and_empty_named_in_order(self):
        result = run(["C", "A", "B"], {"A": "1", "B": ""})
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stderr.strip(), "missing: C, B")

    def test_no_arguments(self):
        result = run([], {})
        self.assertEqual(result.returncode, 2)
        self.assertTrue(result.stderr.strip())


if __name__ == "__main__":
    unittest.main()
