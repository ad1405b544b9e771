import os
import sys
import unittest

sys.path.insert(0, os.getcwd())
from semver import newest, parse  # noqa: E402

ORDERED = [
    "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
    "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.2.0", "1.9.0", "1.10.0", "2.0.0-rc.1", "2.0.0",
]


class SemverTest(unittest.TestCase):
    def test_numeric_parts(self):
        self.assertEqual(newest(["1.9.0", "1.10.0", "1.2.0"]), "1.10.0")

    def test_release_beats_prerelease(self):
        self.assertEqual(newest(["2.0.0-rc.1", "2.0.0", "1.99.99"]), "2.0.0")

    def test_spec_precedence_chain(self):
        for lower, higher in zip(ORDERED, ORDERED[1:]):
            self.assertEqual(newest([higher, lower]), higher, (lower, higher))
            self.assertEqual(newest([lower, higher]), higher, (lower, higher))

    def test_build_metadata_ignored_in_order(self):
        self.assertEqual(newest(["1.0.0+build.5", "1.0.1"]), "1.0.1")

    def test_not_a_version(self):
        for bad in ("1.0", "v1.0.0", "1.0.x", "", "1.0.0-"):
            with self.assertRaises(ValueError, msg=bad):
                parse(bad)


if __name__ == "__main__":
    unittest.main()
