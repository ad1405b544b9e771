"""The memory and message tools' published schemas: generated from their argument models, named
as the categories list them, and refusing what is not an object before touching the database."""

from __future__ import annotations

import pytest

from shared.memory import ToolCall
from shared.project_config import MemoryConfig
from shared.tool_names import COORDINATION_TOOLS as LISTED
from workers.tools.base import input_schema
from workers.tools.coordination import COORDINATION_TOOLS, Caller, answer

pytestmark = pytest.mark.unit


def test_the_tools_are_the_ones_the_categories_list() -> None:
    assert tuple(COORDINATION_TOOLS) == LISTED


@pytest.mark.parametrize("name", LISTED)
def test_each_schema_is_generated_from_its_argument_model(name: str) -> None:
    tool = COORDINATION_TOOLS[name]
    spec = tool.spec()
    assert spec["input_schema"] == input_schema(tool.args_model)
    assert spec["input_schema"]["additionalProperties"] is False
    assert all(prop["description"] for prop in spec["input_schema"]["properties"].values())
    assert 80 < len(spec["description"]) < 500  # short: every call carries it


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("memory_write", ["k", "v"], "memory_write: the arguments must be a JSON object, not list"),
        ("memory_read", {}, "memory_read: missing required argument 'key'"),
        ("memory_search", {"query": "x", "limit": 0}, "memory_search: argument 'limit': input should be"),
        ("memory_search", {"query": "x", "limit": "5"}, "memory_search: argument 'limit': input should be"),
        ("send_message", {"to": "parent", "text": "hi", "cc": "x"}, "send_message: unexpected argument 'cc'"),
        (
            "memory_write",
            {"key": "k", "value": "nul\x00"},
            "memory_write: argument 'value': the text contains",
        ),
    ],
)
def test_bad_arguments_are_an_error_result_before_any_database_work(
    name: str, args: object, message: str
) -> None:
    caller = Caller(ToolCall("p", "a", "i", "toolu_1"), "project:p", MemoryConfig())
    result = answer(caller, name, args).result
    assert result.is_error
    assert result.content.startswith(message)
