"""Reading a project's memory bank: its keys, a full-text search, its size.

These only read (a search by an agent, which records what it saw, is the worker's). The bank is
the project's own, or its tenant's when the project's raas.toml says ``[memory] scope = "tenant"``.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy.orm import Session

from orchestrator.scheduling.lookup import get_project_row
from shared import memory
from shared.db import session_scope
from shared.errors import InvalidInput
from shared.models import Project
from shared.project_config import ProjectConfig
from shared.schemas import MemoryEntryOut, MemorySizeOut

LIST_LIMIT = 1000


class _Search(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: memory.SearchQuery
    tags: memory.Tags = Field(default_factory=list)
    limit: int = Field(default=10, ge=1, le=memory.SEARCH_LIMIT)


def search_memory(
    project_id: str, query: str, tags: Sequence[str] = (), limit: int = 10
) -> list[MemoryEntryOut]:
    """The keys of the project's bank whose current values match ``query``, best first.

    ``query`` is full-text search syntax (words, "a phrase", ``or``, ``-word``); with ``tags``
    only values carrying all of them count; at most ``limit`` (1 to 50) keys.

    Raises:
        NotFound: no such project.
        InvalidInput: a blank or overlong query, a malformed tag, a limit out of range.
    """
    try:
        search = _Search(query=query, tags=list(tags), limit=limit)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        msg = f"memory search: {where}: {str(first['msg']).removeprefix('Value error, ')}"
        raise InvalidInput(msg) from exc
    with session_scope() as session:
        bank, _ = bank_of(get_project_row(session, project_id))
        return memory.search(session, bank, search.query, search.tags, search.limit)


def list_memory(project_id: str, tags: Sequence[str] = (), limit: int = LIST_LIMIT) -> list[MemoryEntryOut]:
    """The keys of the project's bank (the first ``limit`` in key order) with their current
    values; with ``tags``, only keys with a current value carrying all of them.

    Raises:
        NotFound: no such project.
    """
    with session_scope() as session:
        bank, _ = bank_of(get_project_row(session, project_id))
        found = memory.entries(session, bank, limit if not tags else None)
    wanted = set(tags)
    kept = [e for e in found if not wanted or any(wanted <= set(v.tags) for v in e.values)]
    return kept[:limit]


def memory_size(session: Session, project: Project) -> MemorySizeOut:
    """How much the project's bank holds (shared: what all its tenant's sharing projects hold)."""
    bank, shared = bank_of(project)
    return memory.size(session, bank, shared=shared)


def bank_of(project: Project) -> tuple[str, bool]:
    """The project's bank and whether it is shared with the tenant's other projects."""
    config = ProjectConfig.model_validate(project.config).memory
    return memory.bank_of(project.id, project.tenant_id, config), config.scope == "tenant"
