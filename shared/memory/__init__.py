"""The memory bank: keys the agents of a project (or of a tenant's projects) write, read and
search, with every write kept and concurrent writes flagged, never silently lost.

Each write of a key is a version with its writer (agent, iteration) and a **version vector**:
how many writes of the key by each agent it has seen, its own included. A write has seen what
its agent read of the key in the same iteration (``memory_read`` records it, :class:`MemoryView`)
and the agent's own earlier writes. A version supersedes the current values its vector
dominates; those it does not stay current beside it, and the key is **in conflict** until a
writer that has read them all writes again. Two parallel subagents writing one key without
reading each other's values therefore leave both, with their writers, for the next reader.

Every write to a bank first locks the bank's row, so the count limit holds with any number of
writers (the same pattern as the budget's reservation, DESIGN.md rule 1), and a tool call's write
is keyed by its iteration and tool_use id: a redelivered iteration never writes twice.

Full-text search runs on Postgres as ``websearch_to_tsquery`` ranked by ``ts_rank`` and on SQLite
as FTS5 ranked by ``bm25``; migration 0004 makes the index of each.

``inputs`` (what the tools take, checked once for the tools, the API and the MCP server),
``bank`` (writing, reading, listing, sizes), ``search`` (full text). Import from here.
"""

from shared.memory.bank import ToolCall, Written, bank_of, dominates, entries, merge, read, size, write
from shared.memory.inputs import (
    KEY_CHARS,
    MAX_TAGS,
    QUERY_CHARS,
    SEARCH_LIMIT,
    TAG_CHARS,
    MemoryKey,
    MemoryValue,
    SearchQuery,
    Tag,
    Tags,
    plain_text,
)
from shared.memory.search import fts5_query, search

__all__ = [
    "KEY_CHARS",
    "MAX_TAGS",
    "QUERY_CHARS",
    "SEARCH_LIMIT",
    "TAG_CHARS",
    "MemoryKey",
    "MemoryValue",
    "SearchQuery",
    "Tag",
    "Tags",
    "ToolCall",
    "Written",
    "bank_of",
    "dominates",
    "entries",
    "fts5_query",
    "merge",
    "plain_text",
    "read",
    "search",
    "size",
    "write",
]
