"""Delivering a project's work to its remote: the outbox row of each delivery and its states."""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, enum_column, new_id, timestamp


class DeliveryKind(str, Enum):
    TASK = "task"  # a task's branch, pushed when the task completes (after its validator)
    PROJECT = "project"  # the project's branch and its pull request, when the run ends or stops early


class DeliveryStatus(str, Enum):
    PENDING = "pending"  # decided; sent to the coordinator queue (the reconcile loop resends old ones)
    DELIVERED = "delivered"
    FAILED = "failed"  # said why in delivery_failed; ``raas deliver ID`` tries again


class Delivery(Base):
    """One delivery of a project's work to its remote: an outbox row (DESIGN.md rule 10).

    Written in the transaction that decides it, keyed by project and ``key`` ("project", or
    "task:<task id>"); deciding again (the project stopped, resumed, then completed) starts a new
    ``round`` of the same row, so the branch and the pull request stay the same. What was done is
    remembered step by step (``pushed_sha``, the pull request, ``noted_round``) so a retried or
    redelivered delivery repeats nothing (orchestrator.delivery).
    """

    __tablename__ = "deliveries"
    __table_args__ = (
        UniqueConstraint("project_id", "key"),
        # The reconcile loop reads the pending ones every pass: the index holds only those.
        Index(
            "ix_deliveries_pending",
            "id",
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(120))
    kind: Mapped[DeliveryKind] = mapped_column(enum_column(DeliveryKind))
    task_key: Mapped[str | None] = mapped_column(String(100))
    status: Mapped[DeliveryStatus] = mapped_column(
        enum_column(DeliveryStatus), default=DeliveryStatus.PENDING
    )
    # The remote as configured (a credential in it is refused at submission), and the branch.
    remote: Mapped[str] = mapped_column(String(2000))
    branch: Mapped[str] = mapped_column(String(255))
    base: Mapped[str | None] = mapped_column(String(255))
    round: Mapped[int] = mapped_column(Integer, default=1)
    # The workspace commit decided on; the project's branch takes the workspace's head when it runs.
    sha: Mapped[str | None] = mapped_column(String(64))
    pushed_sha: Mapped[str | None] = mapped_column(String(64))
    # How the run ended, for the pull request: the project's status and its reason in words.
    ending: Mapped[str | None] = mapped_column(String(20))
    reason: Mapped[str | None] = mapped_column(Text)
    pull_request_number: Mapped[int | None] = mapped_column(Integer)
    pull_request_url: Mapped[str | None] = mapped_column(String(2000))
    # The last round whose pull request body (and comment, after the first) is written.
    noted_round: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    # When a message for it was last sent to the broker; the reconcile loop resends old ones.
    enqueued_at: Mapped[datetime | None] = timestamp()
    delivered_at: Mapped[datetime | None] = timestamp()
