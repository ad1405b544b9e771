"""Where each project's workspace is, when the coordinators keep workspaces in an object store.

One row per workspace: the object holding its current state and a generation that grows by one
with every write. A writer holds the row's lock for its whole write, so writes to a workspace
are serialised across every coordinator replica; a replica's local copy is only a cache, stale
when its generation is lower than the row's. No foreign key to ``projects``: a workspace is
written before its project's row is (submission makes the repository first).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, String
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, timestamp


class WorkspaceHead(Base):
    __tablename__ = "workspace_heads"

    project_id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # 0 while the first write is under way (the row exists to be locked); then 1, 2, ...
    generation: Mapped[int] = mapped_column(BigInteger, default=0)
    # The key of the bundle (``git bundle --all``) holding this generation; None at generation 0.
    object_key: Mapped[str | None] = mapped_column(String(512), nullable=True)
    updated_at: Mapped[datetime] = timestamp(nullable=False)
