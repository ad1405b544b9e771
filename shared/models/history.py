"""What happened to a project, append-only: its events and its budget ledger."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, enum_column, timestamp


class LedgerKind(str, Enum):
    RESERVE = "reserve"
    SETTLE = "settle"


class Event(Base):
    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("project_id", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    agent_id: Mapped[str | None] = mapped_column(String(32))
    iteration_id: Mapped[str | None] = mapped_column(String(32))
    type: Mapped[str] = mapped_column(String(50))
    data: Mapped[dict[str, Any]]
    ts: Mapped[datetime] = timestamp(nullable=False)


class LedgerEntry(Base):
    """The budget ledger: every reservation and settlement, so spend can be audited."""

    __tablename__ = "budget_ledger"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    iteration_id: Mapped[str | None] = mapped_column(String(32))
    kind: Mapped[LedgerKind] = mapped_column(enum_column(LedgerKind))
    amount_usd: Mapped[Decimal]
    # A settlement also releases what the iteration held in reservation.
    released_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    created_at: Mapped[datetime] = timestamp(nullable=False)
