"""read, write and edit: exact semantics, on a LocalSandbox (same confinement code as Docker's)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.sandbox.base import SandboxLimits
from workers.sandbox.local import LocalSandbox
from workers.tools import execute
from workers.tools.files import DEFAULT_LINES, MAX_LINE_CHARS

pytestmark = pytest.mark.unit


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "three.txt").write_text("one\ntwo\nthree\n")
    (ws / "dup.txt").write_text("x = 1\nx = 1\nx = 1\n")
    (ws / "escape").symlink_to(tmp_path)
    (tmp_path / "outside.txt").write_text("not yours\n")
    return ws


@pytest.fixture
def box(workspace: Path) -> Iterator[LocalSandbox]:
    with LocalSandbox.start(host_workspace=workspace, limits=SandboxLimits()) as sandbox:
        yield sandbox


def test_read_numbers_every_line_from_one(box: LocalSandbox) -> None:
    assert execute(box, "read", {"path": "three.txt"}).content == "     1\tone\n     2\ttwo\n     3\tthree"


def test_read_range_is_inclusive_and_says_where_it_is(box: LocalSandbox) -> None:
    result = execute(box, "read", {"path": "three.txt", "start_line": 2, "end_line": 2})
    assert result.content == "     2\ttwo\n[lines 2-2 of 3]"


def test_read_past_the_end_is_an_error(box: LocalSandbox) -> None:
    result = execute(box, "read", {"path": "three.txt", "start_line": 9})
    assert result.is_error
    assert "past the end" in result.content


def test_read_of_a_long_file_shows_the_first_lines_and_how_many_there_are(
    box: LocalSandbox, workspace: Path
) -> None:
    (workspace / "long.txt").write_text("".join(f"line {n}\n" for n in range(1, 5001)))
    lines = execute(box, "read", {"path": "long.txt"}).content.splitlines()
    assert len(lines) == DEFAULT_LINES + 1
    assert lines[-1] == f"[lines 1-{DEFAULT_LINES} of 5000]"


def test_read_cuts_very_long_lines(box: LocalSandbox, workspace: Path) -> None:
    (workspace / "wide.txt").write_text("y" * (MAX_LINE_CHARS + 10) + "\n")
    assert execute(box, "read", {"path": "wide.txt"}).content.endswith("[line cut: 10 more characters]")


def test_read_refuses_binary_files(box: LocalSandbox, workspace: Path) -> None:
    (workspace / "blob.bin").write_bytes(b"\x7fELF\0\0\1")
    result = execute(box, "read", {"path": "blob.bin"})
    assert result.is_error
    assert "binary" in result.content


def test_write_creates_parent_directories_and_overwrites(box: LocalSandbox, workspace: Path) -> None:
    assert (
        execute(box, "write", {"path": "a/b/c.txt", "content": "first"}).content
        == "wrote 5 bytes to a/b/c.txt"
    )
    execute(box, "write", {"path": "a/b/c.txt", "content": "é"})
    assert (workspace / "a/b/c.txt").read_bytes() == "é".encode()


def test_edit_replaces_the_single_occurrence(box: LocalSandbox, workspace: Path) -> None:
    result = execute(box, "edit", {"path": "three.txt", "old_text": "two\n", "new_text": "2\n"})
    assert result.content == "edited three.txt: replaced 1 occurrence at line 2"
    assert (workspace / "three.txt").read_text() == "one\n2\nthree\n"


def test_edit_refuses_text_that_is_absent(box: LocalSandbox, workspace: Path) -> None:
    result = execute(box, "edit", {"path": "three.txt", "old_text": "four", "new_text": "4"})
    assert result.is_error
    assert "not found in three.txt" in result.content
    assert (workspace / "three.txt").read_text() == "one\ntwo\nthree\n"


def test_edit_refuses_text_that_occurs_several_times(box: LocalSandbox, workspace: Path) -> None:
    result = execute(box, "edit", {"path": "dup.txt", "old_text": "x = 1", "new_text": "x = 2"})
    assert result.is_error
    assert "occurs 3 times in dup.txt; include more context" in result.content
    assert (workspace / "dup.txt").read_text() == "x = 1\nx = 1\nx = 1\n"


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read", {"path": "../outside.txt"}),
        ("read", {"path": "escape/outside.txt"}),
        ("write", {"path": "escape/new.txt", "content": "x"}),
        ("write", {"path": "../new.txt", "content": "x"}),
        ("edit", {"path": "escape/outside.txt", "old_text": "not", "new_text": "now"}),
    ],
)
def test_file_tools_refuse_paths_outside_the_workspace(
    box: LocalSandbox, workspace: Path, tool: str, args: dict[str, str]
) -> None:
    result = execute(box, tool, args)
    assert result.is_error
    assert "outside the workspace" in result.content
    assert (workspace.parent / "outside.txt").read_text() == "not yours\n"
    assert not (workspace.parent / "new.txt").exists()


def test_an_absolute_path_inside_the_workspace_is_fine(box: LocalSandbox, workspace: Path) -> None:
    assert execute(box, "read", {"path": str(workspace / "three.txt")}).content.startswith("     1\tone")
