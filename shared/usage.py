"""The tokens an LLM call used: one model, spelled as the Messages API spells it.

Everything that counts tokens holds a :class:`Usage`: the stream assembler (from the API's
``usage``), pricing, the ledger's message rows (same column names), the scripted model's script,
cost reports and receipts, transcripts. Two formats that were public before this model spell the
counts otherwise and keep their spelling through :class:`Spelled`, which renames the keys on the
way in and out (and in the JSON schema) while Python code reads the one set of names:

- transcripts (JSON): ``cache_write_tokens`` and ``cache_read_tokens`` for the cache counts;
- cost reports (``GET /v1/projects/{id}/costs``): ``input``, ``output``, ``cache_write``,
  ``cache_read``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema


class Usage(BaseModel):
    """Token counts of one LLM call (or a sum of calls), as the Messages API reports them."""

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cache_creation_input_tokens: int = Field(default=0, ge=0)
    cache_read_input_tokens: int = Field(default=0, ge=0)

    @classmethod
    def from_counts(cls, counts: Iterable[int]) -> Usage:
        """The usage of up to four counts in field order; those left out are 0."""
        return cls(**dict(zip(cls.model_fields, counts, strict=False)))

    def counts(self) -> list[int]:
        """The four counts in field order: input, output, cache writes, cache reads."""
        return [getattr(self, name) for name in Usage.model_fields]

    def __add__(self, other: Usage) -> Usage:
        return Usage(**{name: getattr(self, name) + getattr(other, name) for name in Usage.model_fields})


class Spelled:
    """``Annotated[Usage, Spelled(...)]``: a :class:`Usage` in a format that names its counts
    otherwise, e.g. ``Spelled(cache_read_input_tokens="cache_read")``; a field not named keeps
    its name."""

    def __init__(self, **keys: str) -> None:
        unknown = set(keys) - set(Usage.model_fields)
        if unknown:
            msg = f"Usage has no field {', '.join(sorted(unknown))}"
            raise TypeError(msg)
        self.keys = {field: keys.get(field, field) for field in Usage.model_fields}
        self._fields = {key: field for field, key in self.keys.items()}

    def read(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {self._fields.get(key, key): count for key, count in value.items()}
        return value

    def write(self, usage: Usage) -> dict[str, int]:
        return dict(zip(self.keys.values(), usage.counts(), strict=True))

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        written = core_schema.dict_schema(core_schema.str_schema(), core_schema.int_schema())
        return core_schema.no_info_before_validator_function(
            self.read,
            handler(source),
            serialization=core_schema.plain_serializer_function_ser_schema(self.write, return_schema=written),
        )

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        count = {"type": "integer", "minimum": 0, "default": 0}
        return {
            "type": "object",
            "properties": {key: dict(count) for key in self.keys.values()},
            "additionalProperties": False,
        }
