"""A project and its tasks, with the statuses and pause reasons that type their columns."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from shared.dag import TaskKind
from shared.models.base import Base, enum_column, new_id, timestamp


class ProjectStatus(str, Enum):
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    # Waiting for a person's approval (an approval task or a built-in point); holds no worker.
    WAITING_FOR_APPROVAL = "waiting_for_approval"
    # Its pull request is open and followed: a failed check or a review starts a round (running
    # again), a merge, a close or a cap ends the follow; the project stays delivered.
    DELIVERED = "delivered"

    @property
    def is_terminal(self) -> bool:
        """Its run is over: nothing runs unless a pull request round reopens a delivered one."""
        return self in (
            ProjectStatus.COMPLETED,
            ProjectStatus.FAILED,
            ProjectStatus.STOPPED,
            ProjectStatus.DELIVERED,
        )


class PauseReason(str, Enum):
    """Why a project is paused: what resuming it waits for (the ``project_paused`` event's reason)."""

    USER = "user"
    BUDGET_EXCEEDED = "budget_exceeded"  # resumes when its limit is raised
    CIRCUIT_BREAKER = "circuit_breaker"  # tries one iteration again after the cooldown
    API_KEY_REQUIRED = "api_key_required"
    APPROVAL = "approval"  # an approval's deadline passed with default "pause"; resuming waits again


class TaskStatus(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class Project(Base):
    __tablename__ = "projects"
    __table_args__ = (
        # The reconcile loop reads the marked projects every pass: the index holds only those.
        Index(
            "ix_projects_waiting_for_worker",
            "id",
            postgresql_where=text("waiting_for_worker_since IS NOT NULL"),
            sqlite_where=text("waiting_for_worker_since IS NOT NULL"),
        ),
        # The projects list pages newest first by (created_at, id), a tenant's or the cluster's:
        # a page reads its own rows, however many projects there are (queries/listing.py).
        Index("ix_projects_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_projects_created", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    # None: created with the cluster token (operators, embedded runs).
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id"))
    name: Mapped[str] = mapped_column(String(200))
    prompt: Mapped[str] = mapped_column(Text)
    config: Mapped[dict[str, Any]]
    status: Mapped[ProjectStatus] = mapped_column(enum_column(ProjectStatus), default=ProjectStatus.CREATED)
    # Why it is paused, failed or stopped, in words; a pause's reason as code is ``pause_reason``.
    status_reason: Mapped[str | None] = mapped_column(Text)
    pause_reason: Mapped[PauseReason | None] = mapped_column(enum_column(PauseReason))
    workspace_sha: Mapped[str | None] = mapped_column(String(64))
    # Allocating event numbers from the project row keeps them gapless per project.
    last_event_seq: Mapped[int] = mapped_column(Integer, default=0)
    budget_limit_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    spent_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    reserved_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    budget_warned: Mapped[bool] = mapped_column(default=False)
    # The circuit breaker's state (orchestrator.scheduling.breaker.Breaker as JSON); None means closed.
    breaker: Mapped[dict[str, Any] | None]
    # Set while its iterations wait and no live worker consumes their queue (scheduling.worker_watch).
    waiting_for_worker_since: Mapped[datetime | None] = timestamp()
    # Where its workspace started when it was submitted from a repository (``--repo``): the URL
    # as given (refused if it carries a credential), the branch and the commit the ref pointed at.
    source_repo: Mapped[str | None] = mapped_column(String(2000))
    source_ref: Mapped[str | None] = mapped_column(String(255))
    source_commit: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = timestamp(nullable=False)
    started_at: Mapped[datetime | None] = timestamp()
    finished_at: Mapped[datetime | None] = timestamp()

    @property
    def status_line(self) -> str | None:
        """The reason on one line, as transcripts and pull requests show it (:func:`reason_line`)."""
        return reason_line(self.pause_reason, self.status_reason)


def reason_line(pause_reason: PauseReason | None, status_reason: str | None) -> str | None:
    """A project's reason on one line, each part once: a pause's code, then its words
    (``budget_exceeded: spent $…``); a failure's or a stop's words alone. The API keeps the two
    apart (``pause_reason``, ``status_reason``); a view that shows one line builds it here."""
    if pause_reason is None:
        return status_reason
    return f"{pause_reason.value}: {status_reason}" if status_reason else pause_reason.value


class Task(Base):
    __tablename__ = "tasks"
    __table_args__ = (UniqueConstraint("project_id", "key"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    key: Mapped[str] = mapped_column(String(100))
    title: Mapped[str] = mapped_column(String(300))
    description: Mapped[str] = mapped_column(Text, default="")
    category: Mapped[str] = mapped_column(String(50), default="builder")
    depends_on: Mapped[list[Any]] = mapped_column(default=list)
    status: Mapped[TaskStatus] = mapped_column(enum_column(TaskStatus), default=TaskStatus.PENDING)
    kind: Mapped[TaskKind] = mapped_column(enum_column(TaskKind), default=TaskKind.WORK)
    wave: Mapped[int] = mapped_column(Integer, default=0)
    # The validator's output when it sent the task back to its builder (backpressure).
    feedback: Mapped[str | None] = mapped_column(Text)
