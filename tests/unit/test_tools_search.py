"""glob and grep semantics (and the helper's glob matcher they rest on)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.sandbox import helper
from workers.sandbox.base import SandboxLimits
from workers.sandbox.local import LocalSandbox
from workers.tools import execute

pytestmark = pytest.mark.unit


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    for rel, text in {
        "README.md": "Hello\n",
        "src/app.py": "import os\nprint('hello')\n",
        "src/pkg/util.py": "def hello():\n    pass\n",
        "src/pkg/data.json": "{}\n",
        ".env": "SECRET=1\n",
        ".git/config": "[core]\n",
        "node/.cache/x.py": "hidden dir\n",
    }.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)
    (ws / "up").symlink_to(tmp_path)
    return ws


@pytest.fixture
def box(workspace: Path) -> Iterator[LocalSandbox]:
    with LocalSandbox.start(host_workspace=workspace, limits=SandboxLimits()) as sandbox:
        yield sandbox


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ("*.md", ["README.md"]),
        ("src/*.py", ["src/app.py"]),
        ("**/*.py", ["src/app.py", "src/pkg/util.py"]),
        ("src/**", ["src/app.py", "src/pkg", "src/pkg/data.json", "src/pkg/util.py"]),
        ("src/pkg/[du]*", ["src/pkg/data.json", "src/pkg/util.py"]),
        ("src/pkg/[!d]*", ["src/pkg/util.py"]),
        ("src/?pp.py", ["src/app.py"]),
        (".*", [".env", ".git"]),
        (".git/*", [".git/config"]),
        ("node/.cache/*.py", ["node/.cache/x.py"]),
        ("*", ["README.md", "node", "src", "up"]),
        ("up/*", None),
    ],
)
def test_glob_semantics(box: LocalSandbox, pattern: str, expected: list[str] | None) -> None:
    result = execute(box, "glob", {"pattern": pattern})
    if expected is None:
        assert result.is_error
        assert "outside the workspace" in result.content
    else:
        assert result.content.splitlines() == expected


def test_glob_does_not_follow_symlinked_directories(box: LocalSandbox) -> None:
    assert "up/" not in execute(box, "glob", {"pattern": "**/*"}).content


def test_glob_says_when_nothing_matches(box: LocalSandbox) -> None:
    assert execute(box, "glob", {"pattern": "*.rs"}).content == "no paths match *.rs"


def test_glob_regex_matches_whole_paths() -> None:
    regex = helper.glob_regex("a/**/b.txt")
    assert regex.fullmatch("a/b.txt")
    assert regex.fullmatch("a/x/y/b.txt")
    assert not regex.fullmatch("a/.x/b.txt")
    assert not regex.fullmatch("za/b.txt")


def test_grep_finds_lines_with_numbers(box: LocalSandbox) -> None:
    result = execute(box, "grep", {"pattern": "hello", "path": "src"})
    assert sorted(result.content.splitlines()) == [
        "src/app.py:2:print('hello')",
        "src/pkg/util.py:1:def hello():",
    ]


def test_grep_ignore_case_and_glob(box: LocalSandbox) -> None:
    assert execute(box, "grep", {"pattern": "HELLO", "ignore_case": True, "glob": "*.md"}).content == (
        "README.md:1:Hello"
    )


def test_grep_skips_hidden_files(box: LocalSandbox) -> None:
    assert execute(box, "grep", {"pattern": "SECRET"}).content == "no matches for 'SECRET'"


def test_grep_reports_a_bad_regex(box: LocalSandbox) -> None:
    result = execute(box, "grep", {"pattern": "(unclosed"})
    assert result.is_error
    assert "regex" in result.content


@pytest.mark.parametrize("path", ["..", "up", "/etc"])
def test_grep_refuses_paths_outside_the_workspace(box: LocalSandbox, path: str) -> None:
    result = execute(box, "grep", {"pattern": "x", "path": path})
    assert result.is_error
    assert "outside the workspace" in result.content
