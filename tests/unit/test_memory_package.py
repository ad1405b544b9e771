"""shared.memory's public names (its modules are private behind them), and how a search query in
``websearch_to_tsquery``'s syntax becomes an FTS5 query on SQLite."""

from __future__ import annotations

import pytest

import shared.memory as memory
from shared.memory import dominates, fts5_query, merge

pytestmark = pytest.mark.unit


def test_the_package_exports_what_its_users_import() -> None:
    assert sorted(memory.__all__) == sorted(
        [
            "KEY_CHARS", "MAX_TAGS", "QUERY_CHARS", "SEARCH_LIMIT", "TAG_CHARS", "MemoryKey", "MemoryValue",
            "SearchQuery", "Tag", "Tags", "ToolCall", "Written", "bank_of", "dominates", "entries",
            "fts5_query", "merge", "plain_text", "read", "search", "size", "write",
        ]
    )  # fmt: skip
    assert all(hasattr(memory, name) for name in memory.__all__)


@pytest.mark.parametrize(
    ("query", "fts5"),
    [
        ("database postgres", '"database" AND "postgres"'),
        ('"a phrase" word', '"a phrase" AND "word"'),
        ("a or b c", '"a" OR "b" AND "c"'),  # AND binds tighter in both, as in websearch_to_tsquery
        ("a -b", '"a" NOT "b"'),
        ("-b a", '"a" NOT "b"'),  # FTS5's NOT needs a term before it
        ("foo.bar", '"foo bar"'),
        ('NEAR(a b) "c', '"NEAR a" AND "b" AND "c"'),  # no FTS5 syntax of the model's gets through
        ("-only", None),
        ("* ()", None),
    ],
)
def test_a_search_query_becomes_an_fts5_query_of_quoted_terms(query: str, fts5: str | None) -> None:
    assert fts5_query(query) == fts5


def test_a_version_vector_dominates_what_it_has_seen() -> None:
    a, b = {"x": 2, "y": 1}, {"x": 1}
    assert dominates(a, b)
    assert not dominates(b, a)
    assert not dominates({"y": 1}, {"x": 1})  # concurrent: neither has seen the other
    assert merge([a, {"y": 3, "z": 1}]) == {"x": 2, "y": 3, "z": 1}
