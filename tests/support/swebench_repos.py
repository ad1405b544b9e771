"""Two tiny local git repositories and a JSONL of three SWE-bench-style instances over them.

``acme/calc`` (cloned as ``acme__calc``): ``add`` subtracts. Instance ``acme__calc-1``'s gold
patch fixes it and its test patch adds ``TestAdd`` to the existing ``test_calc.py``;
``acme__calc-2``'s "gold" patch only edits the README, so its new ``test_neg.py`` still fails
after it (the oracle ``raas eval check`` must refuse). ``widgets/text`` (cloned as
``widgets/text``): ``shout`` forgets the "!"; its test patch adds a new file, and its test lists
are JSON-encoded strings, as SWE-bench ships them. Each repository has a commit after the base,
so the import must take the base commit, not HEAD. Tests are ``python3 -m unittest`` ids (the
sandbox image has no pytest).
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

TEST_COMMAND = "python3 -m unittest"
# Lines only the test patches hold: none may appear in an imported workspace.
TEST_PATCH_MARKS = ("HIDDEN_SWEBENCH_ADD", "HIDDEN_SWEBENCH_NEG", "HIDDEN_SWEBENCH_SHOUT")

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
CALC_TESTS = (
    "import unittest\n\nfrom calc import mul\n\n\nclass TestMul(unittest.TestCase):\n"
    "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n"
)
CALC_TESTS_PATCHED = CALC_TESTS.replace("from calc import mul", "from calc import add, mul") + (
    "\n\nclass TestAdd(unittest.TestCase):\n    def test_add(self):  # HIDDEN_SWEBENCH_ADD\n"
    "        self.assertEqual(add(2, 3), 5)\n"
)
NEG_TESTS = (
    "import unittest\n\nfrom calc import neg\n\n\nclass TestNeg(unittest.TestCase):\n"
    "    def test_neg(self):  # HIDDEN_SWEBENCH_NEG\n        self.assertEqual(neg(2), -2)\n"
)
TEXT = "def shout(s):\n    return s.upper()\n"
TEXT_TESTS = (
    "import unittest\n\nfrom text import shout\n\n\nclass TestShout(unittest.TestCase):\n"
    '    def test_shout(self):  # HIDDEN_SWEBENCH_SHOUT\n        self.assertEqual(shout("hi"), "HI!")\n'
)


@dataclass(frozen=True)
class Fixture:
    repos: Path
    jsonl: Path
    records: list[dict[str, object]]
    bases: dict[str, str]  # repo -> base commit


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD").strip()


def _patch(repo: Path, base: str, files: dict[str, str]) -> str:
    """The diff from ``base`` to ``base`` with ``files`` written, made on a side branch."""
    _git(repo, "checkout", "-q", "--detach", base)
    tip = _commit(repo, files, "patch")
    diff = _git(repo, "diff", base, tip)
    _git(repo, "checkout", "-q", "main")
    return diff


def _repo(path: Path, files: dict[str, str]) -> str:
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    base = _commit(path, files, "base")
    _commit(path, {"README.md": "after the base\n"}, "later")
    return base


def make_fixture(root: Path) -> Fixture:
    """The repositories under ``root/repos`` and the instances in ``root/instances.jsonl``."""
    repos = root / "repos"
    calc, text = repos / "acme__calc", repos / "widgets" / "text"
    calc_base = _repo(calc, {"calc.py": CALC, "test_calc.py": CALC_TESTS, "README.md": "calc\n"})
    text_base = _repo(text, {"text.py": TEXT, "README.md": "text\n"})
    records: list[dict[str, object]] = [
        {
            "instance_id": "acme__calc-1",
            "repo": "acme/calc",
            "base_commit": calc_base,
            "problem_statement": "add(2, 3) returns -1; it should return 5.",
            "hints_text": "Look at the operator in add.",
            "patch": _patch(calc, calc_base, {"calc.py": CALC.replace("a - b", "a + b")}),
            "test_patch": _patch(calc, calc_base, {"test_calc.py": CALC_TESTS_PATCHED}),
            "FAIL_TO_PASS": ["test_calc.TestAdd.test_add"],
            "PASS_TO_PASS": ["test_calc.TestMul.test_mul"],
            "difficulty": "<15 min fix",
        },
        {
            "instance_id": "acme__calc-2",
            "repo": "acme/calc",
            "base_commit": calc_base,
            "problem_statement": "Add neg(x), returning -x.",
            "patch": _patch(calc, calc_base, {"README.md": "calc, with neg one day\n"}),
            "test_patch": _patch(calc, calc_base, {"test_neg.py": NEG_TESTS}),
            "FAIL_TO_PASS": ["test_neg.TestNeg.test_neg"],
            "PASS_TO_PASS": [],
        },
        {
            "instance_id": "widgets__text-7",
            "repo": "widgets/text",
            "base_commit": text_base,
            "problem_statement": 'shout("hi") must return "HI!".',
            "patch": _patch(text, text_base, {"text.py": TEXT.replace("s.upper()", 's.upper() + "!"')}),
            "test_patch": _patch(text, text_base, {"test_text.py": TEXT_TESTS}),
            "FAIL_TO_PASS": json.dumps(["test_text.TestShout.test_shout"]),
            "PASS_TO_PASS": "[]",
            "difficulty": "1-4 hours",
        },
    ]
    jsonl = root / "instances.jsonl"
    write_jsonl(jsonl, records)
    return Fixture(repos, jsonl, records, {"acme/calc": calc_base, "widgets/text": text_base})


def write_jsonl(path: Path, records: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
