"""The agent's tools in a real sandbox, through the helper and through the no-python fallback.

Both paths must answer alike: same confinement, same results.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.sandboxes import SandboxFactory
from workers.sandbox.docker import DockerSandbox
from workers.tools import execute

pytestmark = [pytest.mark.docker, pytest.mark.integration]


@pytest.fixture(params=["helper", "fallback"])
def box(request: pytest.FixtureRequest, make_sandbox: SandboxFactory, tmp_path: Path) -> DockerSandbox:
    """A sandbox over a small project, with symlinks that lead out of the workspace."""
    workspace = tmp_path / "project"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "app.py").write_text("def main():\n    return 'hello'\n\nmain()\n")
    (workspace / "notes.md").write_text("todo: hello\ntodo: world\n")
    (workspace / ".hidden").write_text("secret-ish\n")
    (workspace / "escape").symlink_to("/etc")
    (workspace / "escape_file").symlink_to("/etc/passwd")
    (workspace / "inner_link").symlink_to("src/app.py")
    image = request.getfixturevalue("no_python_image") if request.param == "fallback" else None
    sandbox = make_sandbox(image=image, workspace=workspace)
    assert sandbox.uses_helper == (request.param == "helper")
    return sandbox


OUTSIDE_CALLS = [
    ("read", {"path": "../../etc/passwd"}),
    ("read", {"path": "/etc/passwd"}),
    ("read", {"path": "escape_file"}),
    ("read", {"path": "escape/hostname"}),
    ("write", {"path": "../evil.txt", "content": "x"}),
    ("write", {"path": "/tmp/evil.txt", "content": "x"}),
    ("write", {"path": "escape/evil.txt", "content": "x"}),
    ("edit", {"path": "escape_file", "old_text": "root", "new_text": "toor"}),
    ("edit", {"path": "/etc/passwd", "old_text": "root", "new_text": "toor"}),
    ("glob", {"pattern": "../*"}),
    ("glob", {"pattern": "/etc/*"}),
    ("glob", {"pattern": "escape/*"}),
    ("grep", {"pattern": "root", "path": ".."}),
    ("grep", {"pattern": "root", "path": "/etc"}),
    ("grep", {"pattern": "root", "path": "escape"}),
]


@pytest.mark.parametrize(("tool", "args"), OUTSIDE_CALLS, ids=[f"{t}-{a}" for t, a in OUTSIDE_CALLS])
def test_file_tools_refuse_paths_that_leave_the_workspace(
    box: DockerSandbox, tool: str, args: dict[str, str]
) -> None:
    result = execute(box, tool, args)
    assert result.is_error
    assert "outside the workspace" in result.content
    assert "root:" not in result.content
    assert box.run("ls /tmp/evil.txt /evil.txt 2>&1 | grep -c 'No such'").output.strip() == "2"


def test_symlinks_that_stay_inside_the_workspace_are_followed(box: DockerSandbox) -> None:
    assert "return 'hello'" in execute(box, "read", {"path": "inner_link"}).content


def test_read_numbers_lines_like_cat_n(box: DockerSandbox) -> None:
    result = execute(box, "read", {"path": "src/app.py", "start_line": 2, "end_line": 3})
    assert result.content == "     2\t    return 'hello'\n     3\t\n[lines 2-3 of 4]"


def test_write_then_edit_then_read_round_trip(box: DockerSandbox) -> None:
    assert execute(box, "write", {"path": "pkg/new/mod.py", "content": "x = 1\ny = 2\n"}).content == (
        "wrote 12 bytes to pkg/new/mod.py"
    )
    edited = execute(box, "edit", {"path": "pkg/new/mod.py", "old_text": "y = 2", "new_text": "y = 3"})
    assert not edited.is_error, edited.content
    assert box.read_file("pkg/new/mod.py") == b"x = 1\ny = 3\n"


def test_edit_reports_absent_and_ambiguous_text_and_changes_nothing(box: DockerSandbox) -> None:
    absent = execute(box, "edit", {"path": "notes.md", "old_text": "todo: later", "new_text": "x"})
    ambiguous = execute(box, "edit", {"path": "notes.md", "old_text": "todo:", "new_text": "done:"})
    assert absent.is_error
    assert "not found" in absent.content
    assert ambiguous.is_error
    assert "occurs 2 times" in ambiguous.content
    assert box.read_file("notes.md") == b"todo: hello\ntodo: world\n"


def test_read_of_a_missing_file_says_so(box: DockerSandbox) -> None:
    result = execute(box, "read", {"path": "nope.txt"})
    assert result.is_error
    assert "No such file" in result.content


def test_glob_lists_sorted_relative_paths_without_hidden_files(box: DockerSandbox) -> None:
    assert execute(box, "glob", {"pattern": "**/*"}).content.splitlines() == [
        "escape",
        "escape_file",
        "inner_link",
        "notes.md",
        "src",
        "src/app.py",
    ]
    assert execute(box, "glob", {"pattern": ".*"}).content == ".hidden"
    assert execute(box, "glob", {"pattern": "src/*.py"}).content == "src/app.py"


def test_grep_returns_path_line_text_and_says_when_nothing_matches(box: DockerSandbox) -> None:
    found = execute(box, "grep", {"pattern": "HELLO", "ignore_case": True, "glob": "*.md"})
    assert found.content == "notes.md:1:todo: hello"
    assert (
        execute(box, "grep", {"pattern": "nothing-like-this"}).content == "no matches for 'nothing-like-this'"
    )
    bad = execute(box, "grep", {"pattern": "(unclosed"})
    assert bad.is_error
    assert "regex" in bad.content


def test_bash_reports_exit_code_timeout_and_truncation(box: DockerSandbox) -> None:
    assert (
        execute(box, "bash", {"command": "echo out; echo err >&2; exit 3"}).content == "exit code 3\nout\nerr"
    )
    timed_out = execute(box, "bash", {"command": "sleep 30", "timeout_s": 1})
    assert timed_out.is_error
    assert "timed out after 1 s" in timed_out.content
    flood = execute(box, "bash", {"command": "yes | head -c 50000000"})
    assert "[output truncated: " in flood.content
    assert execute(box, "bash", {"command": "echo alive"}).content == "exit code 0\nalive"
