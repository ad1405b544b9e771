"""The SQLAlchemy models: everything that outlives a process lives here.

Ids are short random hex strings so they can travel in URLs, Celery arguments and log lines.
The same status enums type the columns, the API schemas and the CLI output.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from decimal import Decimal
from enum import Enum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ColumnElement,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    UniqueConstraint,
    bindparam,
    text,
)
from sqlalchemy import Enum as SAEnum
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from shared.dag import TaskKind


def new_id() -> str:
    return secrets.token_hex(8)


def utcnow() -> datetime:
    return datetime.now(UTC)


class ProjectStatus(str, Enum):
    CREATED = "created"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def is_terminal(self) -> bool:
        return self in (ProjectStatus.COMPLETED, ProjectStatus.FAILED, ProjectStatus.STOPPED)


class PauseReason(str, Enum):
    """Why a project is paused: what resuming it waits for (the ``project_paused`` event's reason)."""

    USER = "user"
    BUDGET_EXCEEDED = "budget_exceeded"  # resumes when its limit is raised
    CIRCUIT_BREAKER = "circuit_breaker"  # tries one iteration again after the cooldown
    API_KEY_REQUIRED = "api_key_required"


class TaskStatus(str, Enum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class AgentStatus(str, Enum):
    IDLE = "idle"
    WORKING = "working"
    BLOCKED = "blocked"
    COMPLETED = "completed"
    ERROR = "error"


class IterationStatus(str, Enum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def is_finished(self) -> bool:
        return self in (IterationStatus.SUCCEEDED, IterationStatus.FAILED)


# Queued or running: what a project has in flight or waiting. Written into the SQL as literals,
# never as parameters, so that Postgres matches it to the partial index ix_iterations_unfinished
# also in a prepared statement's generic plan; there a parameter's value is unknown, the planner
# guesses a project's rows from the average project, and a long project's whole history was read.
UNFINISHED_SQL = "status IN ('queued', 'running')"


class ErrorKind(str, Enum):
    """Why an iteration failed: what the coordinator and the circuit breaker act on."""

    API_KEY = "api_key"
    LLM = "llm"
    REFUSAL = "refusal"
    MAX_TOKENS = "max_tokens"
    CONTEXT_TOO_LONG = "context_too_long"
    WORKSPACE = "workspace"
    WORKER_LOST = "worker_lost"
    BUDGET = "budget"
    INTERNAL = "internal"


class LedgerKind(str, Enum):
    RESERVE = "reserve"
    SETTLE = "settle"


Money = Numeric(14, 6)


def _enum(enum_type: type[Enum]) -> SAEnum:
    # Stored as plain strings so the same migration runs on Postgres and SQLite.
    return SAEnum(enum_type, native_enum=False, length=16, values_callable=lambda e: [m.value for m in e])


def _ts(nullable: bool = True) -> Mapped[Any]:
    # Non-nullable timestamps are creation times and default to now.
    return mapped_column(DateTime(timezone=True), nullable=nullable, default=None if nullable else utcnow)


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON, Decimal: Money}


class Tenant(Base):
    """Who owns projects: a team. Its members' tokens see only its projects."""

    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    submissions_per_hour: Mapped[int] = mapped_column(Integer, default=60)
    created_at: Mapped[datetime] = _ts(nullable=False)


class ApiToken(Base):
    """A tenant's API token, stored as its SHA-256: a leaked database leaks no usable token."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = _ts(nullable=False)


class CredentialKind(str, Enum):
    TOKEN = "token"  # HTTPS: a username and a token (or password), given to git's credential helper
    SSH_KEY = "ssh_key"  # a private key, given to ssh through a key file only git's child reads


class GitCredential(Base):
    """A tenant's credential for one git host, encrypted at rest (orchestrator.remotes.credentials):
    the database holds only the Fernet token of the secret, never the secret itself."""

    __tablename__ = "git_credentials"
    __table_args__ = (UniqueConstraint("tenant_id", "host"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    # None: set with the cluster token (operators, embedded runs).
    tenant_id: Mapped[str | None] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    # The host as in the remote's URL, with its port when it has one ("git.example.org:8443").
    host: Mapped[str] = mapped_column(String(255))
    kind: Mapped[CredentialKind] = mapped_column(_enum(CredentialKind))
    username: Mapped[str] = mapped_column(String(200), default="")
    secret_encrypted: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = _ts(nullable=False)
    updated_at: Mapped[datetime] = _ts(nullable=False)


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
    status: Mapped[ProjectStatus] = mapped_column(_enum(ProjectStatus), default=ProjectStatus.CREATED)
    # Why it is paused, failed or stopped, in words; a pause's reason as code is ``pause_reason``.
    status_reason: Mapped[str | None] = mapped_column(Text)
    pause_reason: Mapped[PauseReason | None] = mapped_column(_enum(PauseReason))
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
    waiting_for_worker_since: Mapped[datetime | None] = _ts()
    # Where its workspace started when it was submitted from a repository (``--repo``): the URL
    # as given (refused if it carries a credential), the branch and the commit the ref pointed at.
    source_repo: Mapped[str | None] = mapped_column(String(2000))
    source_ref: Mapped[str | None] = mapped_column(String(255))
    source_commit: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = _ts(nullable=False)
    started_at: Mapped[datetime | None] = _ts()
    finished_at: Mapped[datetime | None] = _ts()

    @property
    def status_line(self) -> str | None:
        """The reason as the API, the CLI and transcripts show it: a pause's code, then its words."""
        if self.pause_reason is not None:
            return f"{self.pause_reason.value}: {self.status_reason}"
        return self.status_reason


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
    status: Mapped[TaskStatus] = mapped_column(_enum(TaskStatus), default=TaskStatus.PENDING)
    kind: Mapped[TaskKind] = mapped_column(_enum(TaskKind), default=TaskKind.WORK)
    wave: Mapped[int] = mapped_column(Integer, default=0)
    # The validator's output when it sent the task back to its builder (backpressure).
    feedback: Mapped[str | None] = mapped_column(Text)


class Agent(Base):
    __tablename__ = "agents"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    task_id: Mapped[str | None] = mapped_column(ForeignKey("tasks.id", ondelete="CASCADE"))
    parent_id: Mapped[str | None] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    depth: Mapped[int] = mapped_column(Integer, default=0)
    category: Mapped[str] = mapped_column(String(50), default="builder")
    # A parallel agent works on a copy of the workspace and hands back a report.
    parallel: Mapped[bool] = mapped_column(default=False)
    # A subagent's instructions, and the parent iteration that spawned it.
    prompt: Mapped[str | None] = mapped_column(Text)
    spawned_by: Mapped[str | None] = mapped_column(String(32), index=True)
    report: Mapped[str | None] = mapped_column(Text)
    status: Mapped[AgentStatus] = mapped_column(_enum(AgentStatus), default=AgentStatus.IDLE)
    iterations: Mapped[int] = mapped_column(Integer, default=0)
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    created_at: Mapped[datetime] = _ts(nullable=False)


class Iteration(Base):
    __tablename__ = "iterations"
    __table_args__ = (
        UniqueConstraint("agent_id", "number"),
        # Unfinished iterations, by project (the scheduler's admission, the budget's holders) or
        # all of them (the reconcile loop): bounded by what is in flight, however long the
        # history. No index leads with status: Postgres took one over the primary key for
        # ``WHERE id = ? AND status = 'running'`` and read every dead entry of 'running'.
        Index(
            "ix_iterations_unfinished",
            "project_id",
            postgresql_where=text(UNFINISHED_SQL),
            sqlite_where=text(UNFINISHED_SQL),
        ),
        Index("ix_iterations_advanced_status", "advanced", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    status: Mapped[IterationStatus] = mapped_column(_enum(IterationStatus), default=IterationStatus.QUEUED)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    worker: Mapped[str | None] = mapped_column(String(200))
    # The Celery task running it, so a stopped project's stragglers can be terminated.
    celery_task_id: Mapped[str | None] = mapped_column(String(64))
    heartbeat_at: Mapped[datetime | None] = _ts()
    completed_task: Mapped[bool] = mapped_column(default=False)
    summary: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    error_kind: Mapped[ErrorKind | None] = mapped_column(_enum(ErrorKind))
    base_sha: Mapped[str | None] = mapped_column(String(64))
    commit_sha: Mapped[str | None] = mapped_column(String(64))
    files_changed: Mapped[list[Any]] = mapped_column(default=list)
    reserved_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    cost_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    # Set by the coordinator once it has acted on this iteration's report, so that a
    # report delivered twice advances the project once.
    advanced: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = _ts(nullable=False)
    # When a message for it was last sent to the broker; the reconcile loop resends old ones.
    enqueued_at: Mapped[datetime | None] = _ts()
    started_at: Mapped[datetime | None] = _ts()
    finished_at: Mapped[datetime | None] = _ts()


def unfinished() -> ColumnElement[bool]:
    """``UNFINISHED_SQL`` in a query, with the statuses rendered as literals (see there)."""
    statuses = [IterationStatus.QUEUED, IterationStatus.RUNNING]
    return Iteration.status.in_(bindparam("unfinished", statuses, expanding=True, literal_execute=True))


class Message(Base):
    """One message of an agent's history; assistant messages carry the call's usage and cost."""

    __tablename__ = "messages"
    # One row per message of one attempt: a re-run after a dead worker is a new attempt, so an
    # LLM call is recorded (and charged) exactly once.
    __table_args__ = (UniqueConstraint("iteration_id", "attempt", "seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    agent_id: Mapped[str] = mapped_column(ForeignKey("agents.id", ondelete="CASCADE"), index=True)
    iteration_id: Mapped[str] = mapped_column(ForeignKey("iterations.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    seq: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[list[Any]]
    model: Mapped[str | None] = mapped_column(String(100))
    stop_reason: Mapped[str | None] = mapped_column(String(50))
    input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    output_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_creation_input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cache_read_input_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cost_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    duration_s: Mapped[float | None]
    created_at: Mapped[datetime] = _ts(nullable=False)


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
    ts: Mapped[datetime] = _ts(nullable=False)


class LedgerEntry(Base):
    """The budget ledger: every reservation and settlement, so spend can be audited."""

    __tablename__ = "budget_ledger"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    project_id: Mapped[str] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"), index=True)
    iteration_id: Mapped[str | None] = mapped_column(String(32))
    kind: Mapped[LedgerKind] = mapped_column(_enum(LedgerKind))
    amount_usd: Mapped[Decimal]
    # A settlement also releases what the iteration held in reservation.
    released_usd: Mapped[Decimal] = mapped_column(default=Decimal(0))
    created_at: Mapped[datetime] = _ts(nullable=False)


class MemoryBank(Base):
    """A memory bank: a project's own (``project:<id>``) or one its tenant's projects share
    (``tenant:<id>``). Every write to the bank locks this row first, so the count limit holds
    with any number of writers; it keeps the bank's size for ``raas status``."""

    __tablename__ = "memory_banks"

    id: Mapped[str] = mapped_column(String(48), primary_key=True)
    entries: Mapped[int] = mapped_column(Integer, default=0)
    # UTF-8 bytes of the current values of all its keys.
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = _ts(nullable=False)


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
    created_at: Mapped[datetime] = _ts(nullable=False)
    updated_at: Mapped[datetime] = _ts(nullable=False)


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
    created_at: Mapped[datetime] = _ts(nullable=False)


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
    created_at: Mapped[datetime] = _ts(nullable=False)


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
    kind: Mapped[DeliveryKind] = mapped_column(_enum(DeliveryKind))
    task_key: Mapped[str | None] = mapped_column(String(100))
    status: Mapped[DeliveryStatus] = mapped_column(_enum(DeliveryStatus), default=DeliveryStatus.PENDING)
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
    created_at: Mapped[datetime] = _ts(nullable=False)
    # When a message for it was last sent to the broker; the reconcile loop resends old ones.
    enqueued_at: Mapped[datetime | None] = _ts()
    delivered_at: Mapped[datetime | None] = _ts()
