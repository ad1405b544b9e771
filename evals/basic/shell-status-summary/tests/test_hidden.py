import os
import subprocess
import tempfile
import unittest

SCRIPT = os.path.join(os.getcwd(), "summarize.sh")
LINE = '1.2.3.4 - - [10/Oct/2024:13:55:36 +0000] "GET /p{n} HTTP/1.1" {code} {size}\n'


def summarize(lines):
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as log:
        log.writelines(lines)
    try:
        result = subprocess.run(["bash", SCRIPT, log.name], capture_output=True, text=True)
    finally:
        os.unlink(log.name)
    return result


class SummaryTest(unittest.TestCase):
    def test_counts_most_frequent_first(self):
        codes = [200] * 12 + [404] * 3 + [500] * 2 + [301] * 3 + [201]
        lines = [LINE.format(n=i, code=c, size=100 + i) for i, c in enumerate(codes)]
        result = summarize(lines)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split("\n"), ["200 12", "301 3", "404 3", "500 2", "201 1", ""])

    def test_skips_blank_and_malformed(self):
        lines = [LINE.format(n=1, code=200, size=5), "\n", "garbage line\n", LINE.format(n=2, code="-", size=0)]
        result = summarize(lines)
        self.assertEqual(result.stdout, "200 1\n")

    def test_sample(self):
        result = subprocess.run(["bash", SCRIPT, "sample.log"], capture_output=True, text=True)
        self.assertEqual(result.stdout, "200 2\n201 1\n404 1\n")


if __name__ == "__main__":
    unittest.main()
