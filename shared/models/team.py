"""The team loop (DESIGN.md rule 13): what people say to a running agent, approvals that wait
for a person, and a delivered pull request followed through its rounds of CI and review.

Each is a row written in the transaction that decides it (rule 12): a wait holds no worker and
survives every restart, because it is nothing but a row with a deadline.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, enum_column, new_id, timestamp


class PersonMessage(Base):
    """What a person said to a project's agent (``raas say``): taken by the first turn boundary of
    the agent it is for (any agent of the project when ``agent_id`` is None), exactly once."""

    __tablename__ = "person_messages"
    __table_args__ = (
        Index(
            "ix_person_messages_waiting",
            "project_id",
            postgresql_where=text("delivered_at IS NULL"),
            sqlite_where=text("delivered_at IS NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    agent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    author: Mapped[str] = mapped_column(String(200))
    text: Mapped[str] = mapped_column(Text)
    # Ends the agent's current turn after the tool call in flight (the built-in loop).
    now: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    delivered_iteration_id: Mapped[str | None] = mapped_column(String(32))
    delivered_at: Mapped[datetime | None] = timestamp()


class ApprovalPoint(str, Enum):
    TASK = "task"  # a kind = "approval" task of the DAG
    PLAN = "plan"  # the planner's task graph, before its tasks start
    DIFF = "diff"  # the project's work, before it is delivered
    SPEND = "spend"  # spending past [approvals] spend_usd


class ApprovalStatus(str, Enum):
    WAITING = "waiting"
    APPROVED = "approved"
    REJECTED = "rejected"
    PAUSED = "paused"  # its deadline passed with default = "pause": the project paused


class ApprovalAction(str, Enum):
    APPROVE = "approve"
    REJECT = "reject"
    PAUSE = "pause"


class Approval(Base):
    """A durable wait for a person, with a deadline and a default action. Decided once: the
    conditional update from ``waiting`` is the only way out, by a person or by the sweeper."""

    __tablename__ = "approvals"
    __table_args__ = (
        UniqueConstraint("project_id", "key"),
        Index(
            "ix_approvals_waiting",
            "deadline",
            postgresql_where=text("status = 'waiting'"),
            sqlite_where=text("status = 'waiting'"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    # "task:<key>", "plan", "diff", "spend": one approval per point of a project.
    key: Mapped[str] = mapped_column(String(120))
    point: Mapped[ApprovalPoint] = mapped_column(enum_column(ApprovalPoint))
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    title: Mapped[str] = mapped_column(String(300))
    status: Mapped[ApprovalStatus] = mapped_column(
        enum_column(ApprovalStatus), default=ApprovalStatus.WAITING
    )
    default_action: Mapped[ApprovalAction] = mapped_column(enum_column(ApprovalAction))
    deadline: Mapped[datetime | None] = timestamp()
    # Token names allowed to decide it; None: any token of the project's tenant.
    approvers: Mapped[list[Any] | None]
    decided_by: Mapped[str | None] = mapped_column(String(200))
    comment: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    decided_at: Mapped[datetime | None] = timestamp()


class FollowStatus(str, Enum):
    WATCHING = "watching"
    IN_ROUND = "in_round"
    ENDED = "ended"


class PrFollow(Base):
    """A delivered project's pull request, watched for failed checks and reviews."""

    __tablename__ = "pr_follows"
    __table_args__ = (Index("ix_pr_follows_pr", "repo", "pr_number"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), unique=True)
    delivery_id: Mapped[str] = mapped_column(ForeignKey("deliveries.id", ondelete="CASCADE"))
    # The repository as the forge spells its path, lower case; the pull request's number.
    repo: Mapped[str] = mapped_column(String(1000))
    pr_number: Mapped[int] = mapped_column(Integer)
    status: Mapped[FollowStatus] = mapped_column(enum_column(FollowStatus), default=FollowStatus.WATCHING)
    rounds: Mapped[int] = mapped_column(Integer, default=0)
    # What the project had spent when the follow began (the per-PR budget counts from it).
    spent_at_start_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    end_reason: Mapped[str | None] = mapped_column(Text)
    # The poller's ETags and what it has seen, by request path.
    poll_state: Mapped[dict[str, Any] | None]
    polled_at: Mapped[datetime | None] = timestamp()
    created_at: Mapped[datetime] = timestamp(nullable=False)
    ended_at: Mapped[datetime | None] = timestamp()


class PrRound(Base):
    """One round of a followed pull request: the feedback that started it, given to the builder's
    next iteration. ``key`` (the failed run's or the review's id) makes a repeated event one round."""

    __tablename__ = "pr_rounds"
    __table_args__ = (UniqueConstraint("follow_id", "key"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    follow_id: Mapped[str] = mapped_column(ForeignKey("pr_follows.id", ondelete="CASCADE"), index=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    key: Mapped[str] = mapped_column(String(300))
    # The PrEvent that started it (orchestrator.scheduling.pr_events), as JSON.
    feedback: Mapped[dict[str, Any]]
    spent_at_start_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    # Review comments replied to (their ids), so a retried delivery replies once.
    replied: Mapped[list[Any] | None]
    created_at: Mapped[datetime] = timestamp(nullable=False)
    finished_at: Mapped[datetime | None] = timestamp()
