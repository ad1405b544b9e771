"""Work that arrives by itself (issue #24): a tenant's triggers and the runs their deliveries ask for.

A :class:`Trigger` holds a source (a forge's webhook, a generic webhook, a schedule), a filter, a
project template and its limits. Every accepted delivery is one :class:`TriggerRun` row, unique on
(trigger, key): the key is the source's delivery id (``X-GitHub-Delivery``, ``X-Gitlab-Event-UUID``,
a generic hook's ``webhook-id``) or a schedule's slot (``slot:<local time>``), so a redelivery finds
the row it made and the run it started. The row is the outbox: it is written in the request's (or the
schedule claim's) transaction, and the run starts from it after the commit
(orchestrator.triggers.start).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from shared.models.base import Base, enum_column, new_id, timestamp


class TriggerSource(str, Enum):
    GITHUB = "github"  # X-Hub-Signature-256 over the raw body
    GITLAB = "gitlab"  # X-Gitlab-Token, the secret itself
    WEBHOOK = "webhook"  # a generic POST /v1/hooks/{trigger}, Standard Webhooks signature
    SCHEDULE = "schedule"  # cron with a time zone, fired by the coordinator


class TriggerStatus(str, Enum):
    ACTIVE = "active"
    PAUSED = "paused"  # deliveries are answered and ignored; schedule slots are skipped


class OnActive(str, Enum):
    """What a delivery for a subject (an issue) whose run is still active does."""

    IGNORE = "ignore"  # nothing: the active run is the answer
    QUEUE = "queue"  # waits, and starts when the active run ends
    RESTART = "restart"  # the active run is stopped (its work delivered) and a new one starts


class CatchUp(str, Enum):
    ONE = "one"  # slots missed while no coordinator ran: the latest one fires once on return
    NONE = "none"  # missed slots are skipped


class RunStatus(str, Enum):
    RECEIVED = "received"  # written by the receiver; the launcher starts it after the commit
    QUEUED = "queued"  # waits for the subject's active run or the trigger's concurrency cap
    STARTING = "starting"  # claimed by one launcher: its project is being created
    STARTED = "started"  # its project exists and was started (``project_id``)
    HANDED_OFF = "handed_off"  # a review comment given to the feedback loop of its pull request
    IGNORED = "ignored"  # a run for the same subject was active (on_active = "ignore"), or paused
    REFUSED = "refused"  # a limit refused it (``trigger_refused``, on its project)
    FAILED = "failed"  # the template could not become a project (the reason says why)


class Trigger(Base):
    """A tenant's trigger: a source, a filter, a project template and its limits."""

    __tablename__ = "triggers"
    __table_args__ = (
        UniqueConstraint("tenant_id", "name"),
        # The clock reads the due schedules every pass: the index holds only schedules.
        Index(
            "ix_triggers_next_slot",
            "next_slot_at",
            postgresql_where=text("next_slot_at IS NOT NULL"),
            sqlite_where=text("next_slot_at IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    # None: made with the cluster token (operators).
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(100))
    source: Mapped[TriggerSource] = mapped_column(enum_column(TriggerSource))
    status: Mapped[TriggerStatus] = mapped_column(enum_column(TriggerStatus), default=TriggerStatus.ACTIVE)
    # The spec as given (shared.triggers.TriggerSpec as JSON, without its secret): filter, template,
    # limits, schedule. The columns below are what queries and the clock read.
    spec: Mapped[dict[str, Any]]
    # The webhook's secret, Fernet-encrypted with the operator's key; None for a schedule.
    secret_encrypted: Mapped[str | None] = mapped_column(Text)
    on_active: Mapped[OnActive] = mapped_column(enum_column(OnActive), default=OnActive.IGNORE)
    budget_per_run_usd: Mapped[Decimal]
    budget_per_day_usd: Mapped[Decimal | None]
    max_concurrent: Mapped[int] = mapped_column(Integer, default=1)
    # The schedule's next due slot (UTC); claimed by moving it with a conditional UPDATE.
    next_slot_at: Mapped[datetime | None] = timestamp()
    created_at: Mapped[datetime] = timestamp(nullable=False)


class TriggerRun(Base):
    """One accepted delivery of a trigger and the run it made: the receiver's outbox row."""

    __tablename__ = "trigger_runs"
    __table_args__ = (
        UniqueConstraint("trigger_id", "key"),
        # The clock's sweep reads the open ones every pass: the index holds only those.
        Index(
            "ix_trigger_runs_open",
            "id",
            postgresql_where=text("status IN ('received', 'queued', 'starting')"),
            sqlite_where=text("status IN ('received', 'queued', 'starting')"),
        ),
        Index("ix_trigger_runs_trigger_created", "trigger_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    trigger_id: Mapped[str] = mapped_column(ForeignKey("triggers.id", ondelete="CASCADE"))
    # The source's delivery id, or ``slot:<local time>`` for a schedule.
    key: Mapped[str] = mapped_column(String(200))
    # What the run is about, for on_active: ``owner/repo#12`` for an issue; None for the others.
    subject: Mapped[str | None] = mapped_column(String(300))
    status: Mapped[RunStatus] = mapped_column(enum_column(RunStatus), default=RunStatus.RECEIVED)
    # The template's fields from the delivery (untrusted text: rendered as quoted data).
    fields: Mapped[dict[str, Any]]
    project_id: Mapped[str | None] = mapped_column(ForeignKey("projects.id", ondelete="SET NULL"), index=True)
    reason: Mapped[str | None] = mapped_column(Text)
    # The issue's comment (forge id) with the run's link, later its result; None until posted.
    issue_comment_id: Mapped[str | None] = mapped_column(String(64))
    result_noted: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = timestamp(nullable=False)
    # When the launcher was last asked to start it; the clock's sweep resends old ones.
    enqueued_at: Mapped[datetime | None] = timestamp()
    started_at: Mapped[datetime | None] = timestamp()
