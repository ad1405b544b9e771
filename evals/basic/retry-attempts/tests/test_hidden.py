import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
from retry import retry  # noqa: E402


class Flaky:
    def __init__(self, failures, error=OSError):
        self.calls, self.failures, self.error = 0, failures, error

    def __call__(self):
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error(f"failure {self.calls}")
        return "ok"


class RetryTest(unittest.TestCase):
    def test_succeeds_on_last_attempt(self):
        sleeps = []
        flaky = Flaky(2)
        self.assertEqual(retry(attempts=3, on=(OSError,), delay_s=1, sleep=sleeps.append)(flaky)(), "ok")
        self.assertEqual((flaky.calls, sleeps), (3, [1, 2]))

    def test_always_failing_raises_last_error_after_all_attempts(self):
        sleeps = []
        flaky = Flaky(10)
        with self.assertRaises(OSError) as caught:
            retry(attempts=4, on=(OSError,), delay_s=0.5, sleep=sleeps.append)(flaky)()
        self.assertEqual(flaky.calls, 4)
        self.assertEqual(str(caught.exception), "failure 4")
        self.assertEqual(sleeps, [0.5, 1.0, 2.0])

    def test_other_exceptions_propagate_at_once(self):
        flaky = Flaky(5, error=KeyError)
        with self.assertRaises(KeyError):
            retry(attempts=3, on=(OSError,), sleep=lambda s: None)(flaky)()
        self.assertEqual(flaky.calls, 1)

    def test_one_attempt(self):
        flaky = Flaky(1)
        with self.assertRaises(OSError):
            retry(attempts=1, sleep=lambda s: None)(flaky)()
        self.assertEqual(flaky.calls, 1)

    def test_bad_attempts(self):
        with self.assertRaises(ValueError):
            retry(attempts=0)

    def test_keeps_name(self):
        @retry()
        def fetch():
            return 1

        self.assertEqual((fetch.__name__, fetch()), ("fetch", 1))


if __name__ == "__main__":
    unittest.main()
