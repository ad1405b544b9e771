"""The agent CLIs' output, recorded from the real binaries against the scripted model
(tests/fixtures/harnesses), parsed into the project's own events, and their ends judged."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from shared.event_payloads import AgentOutputChunk, AgentToolCall, LlmRetry, ToolExecuted
from shared.events import EventData
from shared.models import ErrorKind
from workers.runners.base import RunFailure
from workers.runners.cli.claude_code import ClaudeParser
from workers.runners.cli.codex import CodexParser
from workers.runners.cli.ending import Finished, RunEnd, judge
from workers.runners.cli.opencode import OpenCodeParser
from workers.runners.cli.runner import take_completion_note

pytestmark = pytest.mark.unit
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "harnesses"


def _parse(path: Path) -> tuple[list[EventData], RunEnd | None]:
    parser = ClaudeParser()
    events = [event for line in path.read_text().splitlines() for event in parser.feed(line)]
    return events, parser.end


@dataclass
class Seen:
    budget_exhausted: bool = False
    auth_failed: bool = False
    project_stopped: bool = False
    max_turns_reached: bool = False
    last_error: str | None = None


def _finished(exit_code: int | None = 0, timed_out: bool = False) -> Finished:
    return Finished("claude-code", exit_code, timed_out, 60.0, "boom: it broke\n")


def test_claude_code_run_becomes_output_tool_call_and_result_events() -> None:
    events, end = _parse(FIXTURES / "claude-code" / "claude_code_complete_h4.jsonl")

    assert [type(e) for e in events] == [
        AgentOutputChunk, AgentToolCall, ToolExecuted, AgentOutputChunk, AgentToolCall, ToolExecuted,
        AgentOutputChunk,
    ]  # fmt: skip
    write, ran = events[1], events[5]
    assert isinstance(write, AgentToolCall)
    assert write.tool == "write"
    assert write.input["file_path"] == "/workspace/hello.py"
    assert isinstance(ran, ToolExecuted)
    assert ran.tool == "bash"
    assert ran.output == "Hello, Constellation!"
    assert not ran.is_error
    assert ran.tool_use_id == events[4].tool_use_id  # type: ignore[attr-defined]
    assert end == RunEnd(
        is_error=False, reason="completed", text="It prints the greeting. TASK COMPLETE", turns=3
    )


def test_claude_code_max_turns_ends_the_iteration_without_completion() -> None:
    _, end = _parse(FIXTURES / "claude-code" / "claude_code_max_turns_h4.jsonl")

    assert end is not None
    assert end.is_error
    assert end.reason == "max_turns"
    result = judge(end, _finished(exit_code=1), Seen(), "TASK COMPLETE", None)
    assert not result.completed


def test_claude_code_auth_failure_reported_as_success_pauses_for_the_key() -> None:
    # Claude Code says subtype "success" here: only is_error, the reason and the status tell.
    events, end = _parse(FIXTURES / "claude-code" / "claude_code_auth_h4.jsonl")

    assert any(isinstance(e, LlmRetry) for e in events)
    assert end is not None
    assert end.is_error
    assert end.api_status == 401
    with pytest.raises(RunFailure) as failure:
        judge(end, _finished(exit_code=1), Seen(), None, None)
    assert failure.value.kind is ErrorKind.API_KEY


def test_what_the_gateway_saw_wins_over_what_the_cli_says() -> None:
    end = RunEnd(is_error=False, reason="completed", text="done")
    with pytest.raises(RunFailure) as budget:
        judge(end, _finished(), Seen(budget_exhausted=True), None, "done")
    assert budget.value.kind is ErrorKind.BUDGET
    with pytest.raises(RunFailure) as key:
        judge(end, _finished(), Seen(auth_failed=True, last_error="401 from upstream"), None, "done")
    assert key.value.kind is ErrorKind.API_KEY


def test_the_gateways_turn_cap_ends_the_iteration_without_completion_whatever_the_cli_says() -> None:
    # Codex and OpenCode end on the refused call as on any API error (is_error, exit 1)
    refused = RunEnd(is_error=True, reason="api_error", text="Wrote hello.py.", api_status=402)
    result = judge(refused, _finished(exit_code=1), Seen(max_turns_reached=True), "TASK COMPLETE", None)
    assert not result.completed
    assert result.summary == "Wrote hello.py."
    # and a run with no result line at all is no crash either
    assert not judge(None, _finished(exit_code=1), Seen(max_turns_reached=True), None, None).completed


def test_a_crash_fails_with_the_end_of_its_stderr_and_a_hang_with_the_limit() -> None:
    with pytest.raises(RunFailure) as crash:
        judge(None, _finished(exit_code=139), Seen(), None, None)
    assert crash.value.kind is ErrorKind.INTERNAL
    assert "exited with 139" in str(crash.value)
    assert "boom: it broke" in str(crash.value)
    with pytest.raises(RunFailure) as hang:
        judge(None, _finished(exit_code=None, timed_out=True), Seen(), None, None)
    assert "60 s limit" in str(hang.value)


def test_an_error_with_exit_zero_or_a_clean_end_with_exit_one_is_no_success() -> None:
    with pytest.raises(RunFailure):
        judge(RunEnd(is_error=True, reason="api_error", text="x"), _finished(0), Seen(), None, "done")
    with pytest.raises(RunFailure):
        judge(RunEnd(is_error=False, reason="completed", text="x"), _finished(1), Seen(), None, "done")


def test_completion_comes_from_the_marker_or_the_completion_file() -> None:
    end = RunEnd(is_error=False, reason="completed", text="All good. TASK COMPLETE")
    assert judge(end, _finished(), Seen(), "TASK COMPLETE", None).completed
    assert not judge(end, _finished(), Seen(), None, None).completed
    noted = judge(end, _finished(), Seen(), None, "Wrote hello.py; it runs.")
    assert noted.completed
    assert noted.summary == "Wrote hello.py; it runs."


def test_the_completion_file_is_read_then_removed_and_a_symlink_is_never_followed(tmp_path: Path) -> None:
    (tmp_path / ".raas").mkdir()
    (tmp_path / ".raas" / "complete").write_text("done\n")
    assert take_completion_note(tmp_path) == "done\n"
    assert not (tmp_path / ".raas").exists()

    secret = tmp_path.parent / f"{tmp_path.name}-host-secret"
    secret.write_text("host file")
    (tmp_path / ".raas").mkdir()
    (tmp_path / ".raas" / "complete").symlink_to(secret)
    assert take_completion_note(tmp_path) is None
    (tmp_path / ".raas" / "complete").unlink()
    (tmp_path / ".raas").rmdir()
    (tmp_path / ".raas").symlink_to(secret.parent)
    assert take_completion_note(tmp_path) is None
    assert secret.read_text() == "host file"


def _parse_with(parser: CodexParser | OpenCodeParser, path: Path) -> list[EventData]:
    return [event for line in path.read_text().splitlines() for event in parser.feed(line)]


def test_codex_run_becomes_the_same_events() -> None:
    parser = CodexParser()
    events = _parse_with(parser, FIXTURES / "codex" / "write-and-run.jsonl")

    calls = [e for e in events if isinstance(e, AgentToolCall)]
    results = [e for e in events if isinstance(e, ToolExecuted)]
    assert [c.tool for c in calls] == ["edit", "bash"]
    assert [r.tool_use_id for r in results] == [c.tool_use_id for c in calls]
    assert results[1].output == "hello from codex\n"
    assert results[1].exit_code == 0
    assert not results[1].is_error
    assert [e.text for e in events if isinstance(e, AgentOutputChunk)][
        -1
    ] == "hello.py prints its greeting. All done."
    assert parser.end == RunEnd(reason="completed", text="hello.py prints its greeting. All done.", turns=1)


def test_codex_auth_failure_pauses_for_the_key() -> None:
    parser = CodexParser()
    _parse_with(parser, FIXTURES / "codex" / "auth-401.jsonl")

    assert parser.end is not None
    assert parser.end.is_error
    assert parser.end.api_status == 401
    with pytest.raises(RunFailure) as failure:
        judge(parser.end, _finished(exit_code=1), Seen(), None, None)
    assert failure.value.kind is ErrorKind.API_KEY


def test_opencode_run_becomes_the_same_events() -> None:
    parser = OpenCodeParser()
    events = _parse_with(parser, FIXTURES / "opencode" / "write-and-run.jsonl")

    calls = [e for e in events if isinstance(e, AgentToolCall)]
    results = [e for e in events if isinstance(e, ToolExecuted)]
    assert [c.tool for c in calls] == ["write", "bash"]
    assert calls[0].input["filePath"] == "/workspace/hello.py"
    assert results[1].output == "hello from opencode\n"
    assert results[1].exit_code == 0
    assert parser.end == RunEnd(reason="completed", text="hello.py prints its greeting. All done.", turns=3)
