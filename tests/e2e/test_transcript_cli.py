"""Reading a finished project from the CLI, end to end: transcript (md, json, scg and back),
logs, replay and pull against a coordinator and a worker running as separate processes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack import ROOT_DIR, Stack, parse_json_lines

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def hello(services: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    """examples/hello run to completion by one coordinator and one worker."""
    logs = tmp_path_factory.mktemp("transcript-cli")
    stack = Stack(log_dir=logs, script=ROOT_DIR / "examples/scripts/hello.json").start()
    try:
        submitted = stack.cli("submit", str(ROOT_DIR / "examples/hello"))
        assert submitted.returncode == 0, submitted.stderr + stack.logs()
        project_id = submitted.stdout.strip()
        followed = stack.cli("follow", project_id, timeout_s=240)
        assert followed.returncode == 0, followed.stdout + followed.stderr + stack.logs()
        yield stack, project_id
    finally:
        stack.stop()


def _one_line_error(result: Any, *fragments: str) -> None:
    stderr = result.stderr.strip()
    assert result.returncode != 0
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("error: ")
    for fragment in fragments:
        assert fragment in stderr, stderr


def test_a_transcript_written_as_scg_reads_back_as_the_same_transcript(
    hello: tuple[Stack, str], tmp_path: Path
) -> None:
    stack, project_id = hello
    # Given the project's transcript saved as scg
    scg = tmp_path / "hello.scg"
    saved = stack.cli("transcript", project_id, "--format", "scg", "-o", str(scg), "--stats")
    assert saved.returncode == 0, saved.stderr
    assert "x smaller" in saved.stderr
    assert scg.read_text(encoding="utf-8").startswith("#TRANSCRIPT v1 ")

    # When the file is read back, Then it is the transcript the coordinator serves
    from_file = stack.cli("transcript", str(scg), "--json")
    from_api = stack.cli("transcript", project_id, "--format", "json")
    assert from_file.returncode == 0, from_file.stderr
    assert json.loads(from_file.stdout) == json.loads(from_api.stdout)
    transcript = json.loads(from_api.stdout)
    assert transcript["metrics"]["tool_calls"] == 3
    assert [m["role"] for m in transcript["messages"]] == [*["user", "assistant"] * 3, "user"]

    # And the Markdown form shows the messages and the totals
    md = stack.cli("transcript", project_id)
    assert "## Messages" in md.stdout
    assert "hello.py" in md.stdout
    assert "| tool_calls | 3 |" in md.stdout


def test_logs_and_replay_print_the_agents_messages(hello: tuple[Stack, str], tmp_path: Path) -> None:
    stack, project_id = hello
    logs = stack.cli("logs", project_id)
    assert logs.returncode == 0, logs.stderr
    assert "→ write" in logs.stdout
    assert "Hello, Constellation!" in logs.stdout
    as_json = stack.cli("logs", project_id, "--json")
    assert len(json.loads(as_json.stdout)) == 7

    replayed = stack.cli("replay", project_id, "--speed", "1000", "--json")
    assert replayed.returncode == 0, replayed.stderr
    assert [m["seq"] for m in parse_json_lines(replayed.stdout)] == [1, 2, 3, 4, 5, 6, 7]
    scg = tmp_path / "hello.scg"
    stack.cli("transcript", project_id, "-f", "scg", "-o", str(scg))
    from_file = stack.cli("replay", str(scg), "--speed", "1000")
    assert from_file.stdout.count("\n#") == 6  # seven message titles


def test_a_file_that_does_not_parse_is_one_line_with_its_line_number(
    hello: tuple[Stack, str], tmp_path: Path
) -> None:
    stack, project_id = hello
    good = stack.cli("transcript", project_id, "-f", "scg").stdout.splitlines()
    bad = tmp_path / "bad.scg"
    bad.write_text("\n".join(good[:9]) + "\n", encoding="utf-8")  # cut short
    out = tmp_path / "out.md"
    result = stack.cli("transcript", str(bad), "-o", str(out))
    _one_line_error(result, f"{bad}:9:", "cut short")
    assert not out.exists()


def test_pull_copies_the_final_workspace_only_into_a_new_or_empty_directory(
    hello: tuple[Stack, str], tmp_path: Path
) -> None:
    stack, project_id = hello
    target = tmp_path / "result"
    pulled = stack.cli("pull", project_id, str(target), "--json")
    assert pulled.returncode == 0, pulled.stderr
    assert json.loads(pulled.stdout)["files"] == 2
    assert sorted(p.name for p in target.iterdir()) == ["README.md", "hello.py"]
    assert (target / "hello.py").read_text() == 'print("Hello, Constellation!")\n'

    # A directory with something in it is refused, and nothing is written next to it
    (target / "hello.py").write_text("mine\n")
    again = stack.cli("pull", project_id, str(target))
    _one_line_error(again, "is not empty")
    assert (target / "hello.py").read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result"]
