"""What a tool is: a name, a description the model reads, an argument model, and a run method.

Arguments come from the model, so they are untrusted: each tool validates them with a strict
pydantic model, the same model its published JSON schema is generated from (:func:`input_schema`),
and every failure becomes a :class:`ToolResult` with ``is_error=True`` and one sentence saying
what to do differently.
"""

from __future__ import annotations

import copy
import functools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Annotated, Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaMode, JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from workers.sandbox.base import Sandbox


class ToolResult(BaseModel):
    """What goes back to the model as a ``tool_result`` block."""

    content: str
    is_error: bool = False


def error(message: str) -> ToolResult:
    return ToolResult(content=message, is_error=True)


class ToolArgs(BaseModel):
    """Base of the argument models: no unknown keys, no type coercion ("5" is not 5). Each field's
    description is what the model reads about that argument."""

    model_config = ConfigDict(extra="forbid", strict=True)


class _ToolSchema(GenerateJsonSchema):
    """A JSON schema as the Anthropic tool format takes it: no titles, and an optional argument
    is its type alone (the model leaves it out; it never needs to send null)."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        generated = super().default_schema(schema)
        if generated.get("default", 0) is None:
            del generated["default"]
        return generated

    def generate(self, schema: CoreSchema, mode: JsonSchemaMode = "validation") -> JsonSchemaValue:
        generated = super().generate(schema, mode)
        generated.pop("title", None)
        generated.setdefault("required", [])
        return generated


def input_schema(args_model: type[BaseModel]) -> dict[str, Any]:
    """The ``input_schema`` the model is shown: generated from the model that validates the input.

    Nested models are written in place rather than as ``$ref``s into ``$defs``: one
    self-contained schema per tool, as the hand-written ones were. Generated once per model
    (every iteration asks for every tool's; generating them was an eighth of a threads worker's
    Python time), handed out as a copy the caller may change.
    """
    return copy.deepcopy(_generated_schema(args_model))


@functools.cache
def _generated_schema(args_model: type[BaseModel]) -> dict[str, Any]:
    generated = args_model.model_json_schema(schema_generator=_ToolSchema)
    defs = generated.pop("$defs", {})
    result: dict[str, Any] = _inline(generated, defs)
    return result


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            return _inline(defs[ref.removeprefix("#/$defs/")], defs)
        return {key: _inline(value, defs) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(item, defs) for item in node]
    return node


#: A path argument, described the same for every file tool.
_PATH = "Path relative to the workspace root (or absolute inside the workspace)."
WorkspacePath = Annotated[str, Field(min_length=1, description=_PATH)]


A = TypeVar("A", bound=ToolArgs)


class Tool(ABC, Generic[A]):
    """One tool; subclasses set the class attributes and implement :meth:`invoke`."""

    name: ClassVar[str]
    description: ClassVar[str]
    args_model: type[A]

    def spec(self) -> dict[str, Any]:
        """The tool in the Anthropic ``tools=`` format."""
        schema = input_schema(self.args_model)
        return {"name": self.name, "description": self.description, "input_schema": schema}

    def with_policy(self, denylist: Sequence[str]) -> Tool[A]:
        """This tool under a project's command denylist (only bash cares)."""
        return self

    def run(self, sandbox: Sandbox, args: dict[str, Any]) -> ToolResult:
        """Validate ``args`` against the schema, then invoke the tool."""
        try:
            parsed = self.args_model.model_validate(args)
        except ValidationError as e:
            return error(f"{self.name}: {describe(e, self.args_model)}")
        return self.invoke(sandbox, parsed)

    @abstractmethod
    def invoke(self, sandbox: Sandbox, args: A) -> ToolResult:
        """Do the work; may raise sandbox errors, which :func:`workers.tools.execute` reports."""


def describe(e: ValidationError, args_model: type[ToolArgs]) -> str:
    """The first validation problem as one sentence the model can act on."""
    first = e.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "arguments"
    allowed = ", ".join(args_model.model_fields)
    if first["type"] == "missing":
        return f"missing required argument '{field}'"
    if first["type"] == "extra_forbidden":
        return f"unexpected argument '{field}'; the arguments are: {allowed}"
    return f"argument '{field}': {first['msg'].lower()}"
