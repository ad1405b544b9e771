"""What an agent may give the memory tools: keys, values, tags and search queries, checked
where the tools' argument models, the API and the MCP server all read them.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

KEY_CHARS = 200
TAG_CHARS = 50
MAX_TAGS = 16
QUERY_CHARS = 500
SEARCH_LIMIT = 50
_TAG = re.compile(r"^[A-Za-z0-9_.:/-]+$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# The validators raise PydanticCustomError: it reads as its message alone, where a ValueError
# would read "Value error, ...".
def _key(value: str) -> str:
    if not value.strip():
        kind, msg = "blank_key", "a key must not be blank"
        raise PydanticCustomError(kind, msg)
    if _CONTROL.search(value):
        kind, msg = "key_not_one_line", "a key must be one line of text (no control characters)"
        raise PydanticCustomError(kind, msg)
    return value


def plain_text(value: str) -> str:
    """Text the database can hold: Postgres text columns refuse NUL characters."""
    if "\x00" in value:
        kind, msg = "nul_in_text", "the text contains a NUL character; send plain text"
        raise PydanticCustomError(kind, msg)
    return value


def _tag(value: str) -> str:
    if not _TAG.match(value):
        kind, msg = "bad_tag", "a tag may hold only letters, digits and _ . : / -"
        raise PydanticCustomError(kind, msg)
    return value


def _query(value: str) -> str:
    if not value.strip():
        kind, msg = "blank_query", "a search query must not be blank"
        raise PydanticCustomError(kind, msg)
    return value


#: A key: one line of text, 1 to 200 characters.
MemoryKey = Annotated[
    str,
    Field(min_length=1, max_length=KEY_CHARS, description="The key: one line of text, up to 200 characters."),
    AfterValidator(_key),
]
#: A value: any text without NUL characters (its size limit is the project's).
MemoryValue = Annotated[str, AfterValidator(plain_text)]
#: A tag: letters, digits and ``_ . : / -``.
Tag = Annotated[
    str,
    Field(min_length=1, max_length=TAG_CHARS, json_schema_extra={"pattern": _TAG.pattern}),
    AfterValidator(_tag),
]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
SearchQuery = Annotated[str, Field(min_length=1, max_length=QUERY_CHARS), AfterValidator(_query)]
