"""Where each project's workspace is, when the coordinators keep workspaces in an object store.

One row per workspace: its base (a bundle of every ref, in the object store) and a generation
that grows by one with every write; one row per write since the base: the refs it changed and
the objects it added. A writer holds the head's lock for its whole write, so writes to a
workspace are serialised across every coordinator replica; a replica's local copy is only a
cache, stale when its generation is lower than the head's. No foreign key to ``projects``: a
workspace is written before its project's row is (submission makes the repository first).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, LargeBinary, String
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, timestamp


class WorkspaceHead(Base):
    __tablename__ = "workspace_heads"

    project_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # 0 while the first write is under way (the row exists to be locked); then 1, 2, ...
    generation: Mapped[int] = mapped_column(BigInteger, default=0)
    # The key of the base (``git bundle --all``); None at generation 0.
    object_key: Mapped[str | None] = mapped_column(String(512), nullable=True)
    # The generation the base holds; the increments after it bring it to ``generation``.
    base_generation: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    updated_at: Mapped[datetime] = timestamp(nullable=False)


class WorkspaceIncrement(Base):
    """One write after the base (orchestrator.workspaces.s3)."""

    __tablename__ = "workspace_increments"

    project_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    # The refs the write changed: {ref: sha, or None when it deleted the ref}.
    refs: Mapped[dict[str, Any]]
    # A pack of the objects it added: here when small, else the object store's key; neither when
    # it added none (it only moved or deleted refs).
    pack: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    object_key: Mapped[str | None] = mapped_column(String(512), nullable=True)
