"""What a tool is: a name, a description the model reads, a JSON schema, and a run method.

Arguments come from the model, so they are untrusted: each tool validates them with a strict
pydantic model that mirrors its published JSON schema, and every failure becomes a
:class:`ToolResult` with ``is_error=True`` and one sentence saying what to do differently.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from workers.sandbox.base import Sandbox


class ToolResult(BaseModel):
    """What goes back to the model as a ``tool_result`` block."""

    content: str
    is_error: bool = False


def error(message: str) -> ToolResult:
    return ToolResult(content=message, is_error=True)


class ToolArgs(BaseModel):
    """Base of the argument models: no unknown keys, no type coercion ("5" is not 5)."""

    model_config = ConfigDict(extra="forbid", strict=True)


A = TypeVar("A", bound=ToolArgs)


class Tool(ABC, Generic[A]):
    """One tool; subclasses set the class attributes and implement :meth:`invoke`."""

    name: ClassVar[str]
    description: ClassVar[str]
    input_schema: ClassVar[dict[str, Any]]
    args_model: type[A]

    def spec(self) -> dict[str, Any]:
        """The tool in the Anthropic ``tools=`` format."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}

    def with_policy(self, denylist: Sequence[str]) -> Tool[A]:
        """This tool under a project's command denylist (only bash cares)."""
        return self

    def run(self, sandbox: Sandbox, args: dict[str, Any]) -> ToolResult:
        """Validate ``args`` against the schema, then invoke the tool."""
        try:
            parsed = self.args_model.model_validate(args)
        except ValidationError as e:
            return error(f"{self.name}: {describe(e, self.input_schema)}")
        return self.invoke(sandbox, parsed)

    @abstractmethod
    def invoke(self, sandbox: Sandbox, args: A) -> ToolResult:
        """Do the work; may raise sandbox errors, which :func:`workers.tools.execute` reports."""


def describe(e: ValidationError, schema: dict[str, Any]) -> str:
    """The first validation problem as one sentence the model can act on."""
    first = e.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "arguments"
    allowed = ", ".join(schema.get("properties", {}))
    if first["type"] == "missing":
        return f"missing required argument '{field}'"
    if first["type"] == "extra_forbidden":
        return f"unexpected argument '{field}'; the arguments are: {allowed}"
    return f"argument '{field}': {first['msg'].lower()}"


def obj_schema(properties: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    """A closed JSON object schema (no properties beyond those listed)."""
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


PATH_PROPERTY: dict[str, Any] = {
    "type": "string",
    "description": "Path relative to the workspace root (or absolute inside the workspace).",
}
