"""The tools' published schemas, and what execute() does with bad input from the model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.errors import InvalidInput, SandboxError, ToolTimeout
from shared.tool_names import SANDBOX_TOOLS
from workers.sandbox.base import ExecResult, SandboxLimits
from workers.sandbox.local import LocalSandbox
from workers.tools import TOOL_NAMES, TOOLS, execute, tool_specs
from workers.tools.base import input_schema

pytestmark = pytest.mark.unit


@pytest.fixture
def box(tmp_path: Path) -> Iterator[LocalSandbox]:
    (tmp_path / "a.txt").write_text("alpha\n")
    with LocalSandbox.start(host_workspace=tmp_path, limits=SandboxLimits()) as sandbox:
        yield sandbox


def test_tool_specs_come_in_the_order_asked_in_the_anthropic_format() -> None:
    specs = tool_specs(["grep", "bash", "read"])
    assert [s["name"] for s in specs] == ["grep", "bash", "read"]
    for spec in specs:
        assert set(spec) == {"name", "description", "input_schema"}
        assert spec["input_schema"]["type"] == "object"
        assert spec["input_schema"]["additionalProperties"] is False
        assert len(spec["description"]) > 80


def test_the_tools_answer_to_the_names_shared_spells_in_its_order() -> None:
    assert tuple(TOOLS) == TOOL_NAMES == SANDBOX_TOOLS


def test_tool_specs_refuses_an_unknown_name() -> None:
    with pytest.raises(InvalidInput, match="unknown tool 'fly'"):
        tool_specs(["bash", "fly"])


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_each_published_schema_is_generated_from_its_argument_model(name: str) -> None:
    tool = TOOLS[name]
    schema = tool.spec()["input_schema"]
    fields = tool.args_model.model_fields
    assert schema == input_schema(tool.args_model)
    assert list(schema["properties"]) == list(fields)
    assert set(schema["required"]) == {f for f, info in fields.items() if info.is_required()}
    for prop in schema["properties"].values():
        # Described for the model; an optional argument is its type alone, never "or null".
        assert prop["description"]
        assert "title" not in prop
        assert "anyOf" not in prop
        assert prop.get("default", "") is not None


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("fly", {}, "unknown tool 'fly'; the tools are: bash, read, write, edit, glob, grep"),
        ("bash", ["ls"], "bash: the arguments must be a JSON object, not list"),
        ("bash", "ls", "bash: the arguments must be a JSON object, not str"),
        ("bash", {}, "bash: missing required argument 'command'"),
        (
            "read",
            {"path": "a.txt", "lines": 3},
            "read: unexpected argument 'lines'; the arguments are: path, ",
        ),
        (
            "read",
            {"path": "a.txt", "start_line": "2"},
            "read: argument 'start_line': input should be a valid integer",
        ),
        ("read", {"path": 7}, "read: argument 'path': input should be a valid string"),
        (
            "grep",
            {"pattern": "x", "ignore_case": "yes"},
            "grep: argument 'ignore_case': input should be a valid boolean",
        ),
        (
            "bash",
            {"command": "ls", "timeout_s": -1},
            "bash: argument 'timeout_s': input should be greater than 0",
        ),
        ("write", {"path": "b.txt"}, "write: missing required argument 'content'"),
    ],
)
def test_bad_input_from_the_model_is_an_error_result_not_an_exception(
    box: LocalSandbox, name: str, args: object, message: str
) -> None:
    result = execute(box, name, args)
    assert result.is_error
    assert result.content.startswith(message)


class _Broken(LocalSandbox):
    """A sandbox whose every command fails the way a dead container does."""

    error: Exception = SandboxError("container vanished")

    def run(self, command: str, timeout_s: float | None = None) -> ExecResult:
        raise self.error

    def read_file(self, path: str) -> bytes:
        raise self.error


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (SandboxError("container vanished"), "bash: the sandbox failed: container vanished"),
        (ToolTimeout("no answer within 30 s"), "bash: no answer within 30 s"),
    ],
)
def test_sandbox_failures_become_error_results(
    tmp_path: Path, error: Exception, expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    sandbox = _Broken(tmp_path, SandboxLimits())
    sandbox.error = error
    result = execute(sandbox, "bash", {"command": "true"})
    assert result.is_error
    assert result.content == expected
    sandbox.close()


def test_results_are_plain_models(box: LocalSandbox) -> None:
    result: Any = execute(box, "read", {"path": "a.txt"})
    assert result.model_dump() == {"content": "     1\talpha", "is_error": False}
