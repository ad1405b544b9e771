"""The rules of a memory bank: writing a key (versions, writers, version vectors, conflicts,
the limits, one write per tool call), reading it (recording what the reader saw), listing a
bank and its size. See the package's docstring for the rule of conflicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from shared import events
from shared.errors import InvalidInput
from shared.event_payloads import MemoryWritten
from shared.models import Agent, Iteration, MemoryBank, MemoryEntry, MemoryVersion, MemoryView, utcnow
from shared.project_config import MemoryConfig
from shared.schemas import EventOut, MemoryEntryOut, MemorySizeOut, MemoryValueOut

PREVIEW_CHARS = 200
Vector = dict[str, int]


def bank_of(project_id: str, tenant_id: str | None, config: MemoryConfig) -> str:
    """The bank a project's agents use: its own, or (``scope = "tenant"``) its tenant's."""
    if config.scope == "tenant":
        return f"tenant:{tenant_id or 'cluster'}"
    return f"project:{project_id}"


@dataclass(frozen=True)
class ToolCall:
    """Who writes, reads or sends: the agent, its iteration, and the tool call doing it (whose
    iteration and tool_use id key the write, so that a redelivered iteration writes once)."""

    project_id: str
    agent_id: str
    iteration_id: str
    tool_use_id: str


@dataclass(frozen=True)
class Written:
    """What a write did: the version it made (or had made, when ``repeated``) and the other
    current values of the key (a conflict), with the event to publish after the commit."""

    version: int
    conflict: bool
    others: list[MemoryValueOut]
    repeated: bool = False
    event: EventOut | None = None


def dominates(a: Vector, b: Vector) -> bool:
    """Whether ``a`` has seen every write ``b`` has."""
    return all(a.get(writer, 0) >= count for writer, count in b.items())


def merge(vectors: Iterable[Vector]) -> Vector:
    merged: Vector = {}
    for vector in vectors:
        for writer, count in vector.items():
            merged[writer] = max(merged.get(writer, 0), count)
    return merged


def write(
    session: Session,
    bank: str,
    key: str,
    value: str,
    tags: Sequence[str],
    writer: ToolCall,
    limits: MemoryConfig,
) -> Written:
    """Write ``value`` under ``key``, keeping what the writer did not see (see the module).

    Raises:
        InvalidInput: the value is over the project's size limit, or the key is new and the bank
            is full. Nothing is written.
    """
    size = len(value.encode())
    if size > limits.max_entry_bytes:
        msg = (
            f"the value is {size} bytes; this project's limit is {limits.max_entry_bytes} "
            "(raas.toml [memory] max_entry_bytes): store less, or split it over several keys"
        )
        raise InvalidInput(msg)
    done = _written_by(session, writer)
    if done is not None:
        return done
    now = utcnow()
    held = _lock_bank(session, bank, now)
    done = _written_by(session, writer)  # a twin attempt may have written while we waited
    if done is not None:
        return done
    entry = session.scalars(
        select(MemoryEntry).where(MemoryEntry.bank_id == bank, MemoryEntry.key == key)
    ).first()
    added = 0
    if entry is None:
        if held >= limits.max_entries:
            msg = (
                f"the memory bank is full ({held} keys, raas.toml [memory] max_entries); "
                "write to a key that exists instead of a new one"
            )
            raise InvalidInput(msg)
        entry = MemoryEntry(bank_id=bank, key=key, version=0, conflict=False, size_bytes=0, created_at=now)
        session.add(entry)
        session.flush()
        added = 1
    vector = _next_vector(session, entry.id, writer)
    current = session.scalars(
        select(MemoryVersion).where(MemoryVersion.entry_id == entry.id, MemoryVersion.current.is_(True))
    ).all()
    superseded = [v for v in current if dominates(vector, v.vector)]
    others = [v for v in current if not dominates(vector, v.vector)]
    for version in superseded:
        version.current = False
    delta = size - sum(v.size_bytes for v in superseded)
    entry.version += 1
    entry.conflict = bool(others)
    entry.size_bytes += delta
    entry.updated_at = now
    session.add(
        MemoryVersion(
            entry_id=entry.id,
            version=entry.version,
            key=key,
            value=value,
            tags=list(tags),
            size_bytes=size,
            vector=vector,
            current=True,
            conflict=bool(others),
            project_id=writer.project_id,
            agent_id=writer.agent_id,
            iteration_id=writer.iteration_id,
            tool_use_id=writer.tool_use_id,
            created_at=now,
        )
    )
    session.execute(
        update(MemoryBank)
        .where(MemoryBank.id == bank)
        .values(entries=MemoryBank.entries + added, size_bytes=MemoryBank.size_bytes + delta)
    )
    _remember(session, entry.id, writer, vector)
    event = events.record(
        session,
        writer.project_id,
        MemoryWritten(
            key=key,
            version=entry.version,
            bank=bank,
            size_bytes=size,
            tags=list(tags),
            conflict=bool(others),
            preview=value[:PREVIEW_CHARS],
            tool_use_id=writer.tool_use_id,
        ),
        agent_id=writer.agent_id,
        iteration_id=writer.iteration_id,
    )
    return Written(entry.version, bool(others), _values(session, others), event=event)


def _lock_bank(session: Session, bank: str, now: Any) -> int:
    """Make sure the bank's row exists, lock it, and return how many keys it holds."""
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(
        insert(MemoryBank)
        .values(id=bank, entries=0, size_bytes=0, updated_at=now)
        .on_conflict_do_nothing(index_elements=["id"])
    )
    locked = session.execute(
        update(MemoryBank).where(MemoryBank.id == bank).values(updated_at=now).returning(MemoryBank.entries)
    )
    return int(locked.scalar_one())


def _written_by(session: Session, writer: ToolCall) -> Written | None:
    """The write this tool call already made (its iteration was delivered again), if any."""
    done = session.scalars(
        select(MemoryVersion).where(
            MemoryVersion.iteration_id == writer.iteration_id, MemoryVersion.tool_use_id == writer.tool_use_id
        )
    ).first()
    if done is None:
        return None
    return Written(done.version, done.conflict, [], repeated=True)


def _next_vector(session: Session, entry_id: int, writer: ToolCall) -> Vector:
    """The new version's vector: what the writer saw (read in this iteration, or wrote before),
    plus one write of its own."""
    seen = session.scalars(
        select(MemoryView.vector).where(
            MemoryView.entry_id == entry_id,
            MemoryView.agent_id == writer.agent_id,
            MemoryView.iteration_id == writer.iteration_id,
        )
    ).all()
    # The agent's latest write of the key has seen every earlier one of its own.
    own = session.scalars(
        select(MemoryVersion.vector)
        .where(MemoryVersion.entry_id == entry_id, MemoryVersion.agent_id == writer.agent_id)
        .order_by(MemoryVersion.version.desc())
        .limit(1)
    ).all()
    vector = merge([*seen, *own])
    vector[writer.agent_id] = vector.get(writer.agent_id, 0) + 1
    return vector


def _remember(session: Session, entry_id: int, writer: ToolCall, vector: Vector) -> None:
    """Record that the writer's agent has seen ``vector`` of the entry in this iteration."""
    view = session.scalars(
        select(MemoryView).where(
            MemoryView.entry_id == entry_id,
            MemoryView.agent_id == writer.agent_id,
            MemoryView.iteration_id == writer.iteration_id,
        )
    ).first()
    if view is None:
        session.add(
            MemoryView(
                entry_id=entry_id, agent_id=writer.agent_id, iteration_id=writer.iteration_id, vector=vector
            )
        )
    else:
        view.vector = merge([view.vector, vector])
    session.flush()


def _find(session: Session, bank: str, key: str) -> MemoryEntry | None:
    return session.scalars(
        select(MemoryEntry).where(MemoryEntry.bank_id == bank, MemoryEntry.key == key)
    ).first()


def read(session: Session, bank: str, key: str, reader: ToolCall | None = None) -> MemoryEntryOut | None:
    """The key's current values (None when it was never written).

    With ``reader`` (an agent's ``memory_read``) what it saw is recorded: its next write of the
    key in the same iteration supersedes these values instead of conflicting with them.
    """
    entry = session.scalars(
        select(MemoryEntry).where(MemoryEntry.bank_id == bank, MemoryEntry.key == key)
    ).first()
    if entry is None:
        return None
    current = _current(session, [entry.id])
    if reader is not None:
        _remember(session, entry.id, reader, merge(v.vector for v in current))
    return _entry(entry, _values(session, current))


def entries(session: Session, bank: str, limit: int | None = 1000) -> list[MemoryEntryOut]:
    """The bank's keys with their current values, in key order (all of them with no ``limit``)."""
    rows = session.scalars(
        select(MemoryEntry).where(MemoryEntry.bank_id == bank).order_by(MemoryEntry.key).limit(limit)
    ).all()
    return as_entries(session, rows, {})


def size(session: Session, bank: str, *, shared: bool) -> MemorySizeOut:
    row = session.get(MemoryBank, bank)
    conflicts = session.scalar(
        select(func.count()).where(MemoryEntry.bank_id == bank, MemoryEntry.conflict.is_(True))
    )
    return MemorySizeOut(
        bank=bank,
        shared=shared,
        entries=row.entries if row else 0,
        size_bytes=row.size_bytes if row else 0,
        conflicts=conflicts or 0,
    )


def _current(session: Session, entry_ids: Sequence[int]) -> list[MemoryVersion]:
    return list(
        session.scalars(
            select(MemoryVersion)
            .where(MemoryVersion.entry_id.in_(entry_ids), MemoryVersion.current.is_(True))
            .order_by(MemoryVersion.entry_id, MemoryVersion.version)
        )
    )


def as_entries(
    session: Session, rows: Sequence[MemoryEntry], ranks: dict[int, float]
) -> list[MemoryEntryOut]:
    """The entries with their current values (and their ranks in a search)."""
    current = _current(session, [e.id for e in rows])
    values = dict(zip((v.id for v in current), _values(session, current), strict=True))
    by_entry: dict[int, list[MemoryValueOut]] = {}
    for version in current:
        by_entry.setdefault(version.entry_id, []).append(values[version.id])
    return [_entry(e, by_entry.get(e.id, []), ranks.get(e.id)) for e in rows]


def _entry(entry: MemoryEntry, values: list[MemoryValueOut], rank: float | None = None) -> MemoryEntryOut:
    return MemoryEntryOut(
        key=entry.key,
        version=entry.version,
        conflict=entry.conflict,
        values=values,
        updated_at=entry.updated_at,
        rank=rank,
    )


def _values(session: Session, versions: Sequence[MemoryVersion]) -> list[MemoryValueOut]:
    """The versions as values with their writers (the agent's category, the iteration's number)."""
    if not versions:
        return []
    agents = {v.agent_id for v in versions}
    iterations = {v.iteration_id for v in versions}
    categories = dict(session.execute(select(Agent.id, Agent.category).where(Agent.id.in_(agents))).all())
    numbers = dict(
        session.execute(select(Iteration.id, Iteration.number).where(Iteration.id.in_(iterations))).all()
    )
    return [
        MemoryValueOut(
            version=v.version,
            value=v.value,
            tags=list(v.tags or []),
            project_id=v.project_id,
            agent_id=v.agent_id,
            agent_category=categories.get(v.agent_id),
            iteration=numbers.get(v.iteration_id),
            written_at=v.created_at,
        )
        for v in versions
    ]
