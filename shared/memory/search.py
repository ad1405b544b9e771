"""Full-text search of a memory bank: on Postgres ``websearch_to_tsquery`` ranked by ``ts_rank``
over a GIN expression index, on SQLite the FTS5 table ``memory_fts`` ranked by ``bm25`` (migration
0004 makes both). Only current values are found; a superseded one no longer is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from shared.memory.bank import as_entries
from shared.models import MemoryEntry
from shared.schemas import MemoryEntryOut


def search(
    session: Session, bank: str, query: str, tags: Sequence[str] = (), limit: int = 10
) -> list[MemoryEntryOut]:
    """The keys whose current values match ``query`` (full text: words, "a phrase", or, -not),
    best first; with ``tags``, only values carrying all of them."""
    if session.get_bind().dialect.name == "postgresql":
        ranked = _search_postgres(session, bank, query, tags, limit)
    else:
        ranked = _search_sqlite(session, bank, query, tags, limit)
    if not ranked:
        return []
    rows = {e.id: e for e in session.scalars(select(MemoryEntry).where(MemoryEntry.id.in_(ranked)))}
    return as_entries(session, [rows[i] for i in ranked], ranked)


# The document is written exactly as migration 0004 indexes it, so Postgres uses the index.
_PG_DOCUMENT = "to_tsvector('english', v.key || ' ' || v.value)"


def _search_postgres(
    session: Session, bank: str, query: str, tags: Sequence[str], limit: int
) -> dict[int, float]:
    sql = (
        f"SELECT v.entry_id, max(ts_rank({_PG_DOCUMENT}, q.query)) AS rank"
        " FROM memory_versions v JOIN memory_entries e ON e.id = v.entry_id,"
        " websearch_to_tsquery('english', :query) AS q(query)"
        f" WHERE e.bank_id = :bank AND v.current AND {_PG_DOCUMENT} @@ q.query{_tag_filter(tags)}"
        " GROUP BY v.entry_id ORDER BY rank DESC, v.entry_id LIMIT :limit"
    )
    rows = session.execute(text(sql), {"query": query, "bank": bank, "limit": limit, **_tag_params(tags)})
    return {entry_id: float(rank) for entry_id, rank in rows}


def _search_sqlite(
    session: Session, bank: str, query: str, tags: Sequence[str], limit: int
) -> dict[int, float]:
    match = fts5_query(query)
    if match is None:
        return {}
    sql = (
        # Materialized: bm25() is only valid in the full-text query itself, which the planner
        # would otherwise flatten into the join.
        "WITH s AS MATERIALIZED"
        " (SELECT rowid, bm25(memory_fts) AS score FROM memory_fts WHERE memory_fts MATCH :match)"
        " SELECT v.entry_id, max(-s.score) AS rank"
        " FROM s JOIN memory_versions v ON v.id = s.rowid JOIN memory_entries e ON e.id = v.entry_id"
        f" WHERE e.bank_id = :bank AND v.current{_tag_filter(tags)}"
        " GROUP BY v.entry_id ORDER BY rank DESC, v.entry_id LIMIT :limit"
    )
    rows = session.execute(text(sql), {"match": match, "bank": bank, "limit": limit, **_tag_params(tags)})
    return {entry_id: float(rank) for entry_id, rank in rows}


def _tag_filter(tags: Sequence[str]) -> str:
    # Tags are stored as a JSON list; a tag's characters (checked by Tag) need no JSON escape,
    # so '"tag"' appears in the text exactly when the list holds it.
    return "".join(f" AND CAST(v.tags AS TEXT) LIKE :tag{i} ESCAPE '\\'" for i in range(len(tags)))


def _tag_params(tags: Sequence[str]) -> dict[str, str]:
    return {f"tag{i}": '%"' + tag.replace("_", "\\_") + '"%' for i, tag in enumerate(tags)}


_TERM = re.compile(r'"([^"]*)"?|(\S+)')
_WORD = re.compile(r"\w+")


def fts5_query(query: str) -> str | None:
    """``websearch_to_tsquery``'s syntax as an FTS5 query: words and "phrases" all match, ``or``
    between two terms matches either, ``-word`` must not match. None when nothing can match.

    Every word is quoted, so nothing the model writes is FTS5 syntax of its own.
    """
    out: list[str] = []
    pending_not: list[str] = []
    joiner = " AND "
    for match in _TERM.finditer(query):
        phrase, bare = match.groups()
        if bare is not None and bare.lower() == "or":
            joiner = " OR " if out else joiner
            continue
        negated = bare is not None and bare.startswith("-") and len(bare) > 1
        words = _WORD.findall(phrase if phrase is not None else bare.removeprefix("-" if negated else ""))
        if not words:
            continue
        term = '"' + " ".join(words) + '"'
        if negated:
            pending_not.append(term)
            continue
        out.append((joiner if out else "") + term)
        out += [f" NOT {t}" for t in pending_not]
        pending_not, joiner = [], " AND "
    if not out:
        return None
    return "".join(out + [f" NOT {t}" for t in pending_not])
