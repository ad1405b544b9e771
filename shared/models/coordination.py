"""What agents share: the memory banks (keys, their versions, what each agent saw) and the
messages agents send each other."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, timestamp


class MemoryBank(Base):
    """A memory bank: a project's own (``project:<id>``) or one its tenant's projects share
    (``tenant:<id>``). Every write to the bank locks this row first, so the count limit holds
    with any number of writers; it keeps the bank's size for ``raas status``."""

    __tablename__ = "memory_banks"

    id: Mapped[str] = mapped_column(String(48), primary_key=True)
    entries: Mapped[int] = mapped_column(Integer, default=0)
    # UTF-8 bytes of the current values of all its keys.
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = timestamp(nullable=False)


class MemoryEntry(Base):
    """One key of a bank. Its current values are the versions no later write has superseded:
    one, or several when writers did not see each other's values (``conflict``)."""

    __tablename__ = "memory_entries"
    __table_args__ = (UniqueConstraint("bank_id", "key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    bank_id: Mapped[str] = mapped_column(ForeignKey("memory_banks.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(200))
    # The number of the key's latest version.
    version: Mapped[int] = mapped_column(Integer, default=0)
    conflict: Mapped[bool] = mapped_column(default=False)
    size_bytes: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    updated_at: Mapped[datetime] = timestamp(nullable=False)


class MemoryVersion(Base):
    """One write of a key: its value, its writer (agent, iteration) and its version vector.

    The full-text index over ``key`` and ``value`` (Postgres: a tsvector GIN index; SQLite: the
    FTS5 table ``memory_fts``) is made by migration 0004, not by these models."""

    __tablename__ = "memory_versions"
    __table_args__ = (
        UniqueConstraint("entry_id", "version"),
        # A tool call writes once, however often its iteration is delivered (DESIGN.md rule 3).
        UniqueConstraint("iteration_id", "tool_use_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    # Looked up by (entry_id, version)'s unique index.
    entry_id: Mapped[int] = mapped_column(ForeignKey("memory_entries.id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    # The entry's key again, for the full-text index (which covers one table).
    key: Mapped[str] = mapped_column(String(200))
    value: Mapped[str] = mapped_column(Text)
    tags: Mapped[list[Any]] = mapped_column(default=list)
    size_bytes: Mapped[int] = mapped_column(Integer)
    # Writes of the key per agent id that this one has seen (its own included).
    vector: Mapped[dict[str, Any]]
    # One of the entry's current values: no later write has seen it and replaced it.
    current: Mapped[bool] = mapped_column(default=True)
    # The key was in conflict right after this write (another current value was not seen).
    conflict: Mapped[bool] = mapped_column(default=False)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    iteration_id: Mapped[str] = mapped_column(ForeignKey("iterations.id", ondelete="CASCADE"))
    tool_use_id: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = timestamp(nullable=False)


class MemoryView(Base):
    """What an agent saw of a key in one iteration (``memory_read``): the version vector its next
    write of the key in that iteration is measured against."""

    __tablename__ = "memory_views"
    __table_args__ = (UniqueConstraint("entry_id", "agent_id", "iteration_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    entry_id: Mapped[int] = mapped_column(ForeignKey("memory_entries.id", ondelete="CASCADE"))
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    iteration_id: Mapped[str] = mapped_column(ForeignKey("iterations.id", ondelete="CASCADE"))
    vector: Mapped[dict[str, Any]]


class AgentMessage(Base):
    """A message from one agent to another (``send_message``), one row per recipient, delivered
    into the recipient's next iteration; ``delivered_to`` is that iteration."""

    __tablename__ = "agent_messages"
    __table_args__ = (
        # A tool call sends once, however often its iteration is delivered (DESIGN.md rule 3).
        UniqueConstraint("iteration_id", "tool_use_id", "recipient_id"),
        # A claim looks for its agent's undelivered messages: the index holds only those.
        Index(
            "ix_agent_messages_undelivered",
            "recipient_id",
            postgresql_where=text("delivered_to IS NULL"),
            sqlite_where=text("delivered_to IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    sender_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    iteration_id: Mapped[str] = mapped_column(ForeignKey("iterations.id", ondelete="CASCADE"))
    tool_use_id: Mapped[str] = mapped_column(String(100))
    recipient_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    broadcast: Mapped[bool] = mapped_column(default=False)
    text: Mapped[str] = mapped_column(Text)
    delivered_to: Mapped[str | None] = mapped_column(
        ForeignKey("iterations.id", ondelete="SET NULL"), index=True
    )
    created_at: Mapped[datetime] = timestamp(nullable=False)
