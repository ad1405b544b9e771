"""Pydantic schemas of what crosses a process boundary: API bodies, events, Celery arguments."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shared.models import (
    AgentStatus,
    DeliveryKind,
    DeliveryStatus,
    IterationStatus,
    PauseReason,
    ProjectStatus,
)


class _FromRow(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class EventOut(_FromRow):
    seq: int
    project_id: str
    agent_id: str | None = None
    iteration_id: str | None = None
    type: str
    data: dict[str, Any]
    ts: datetime


class AgentOut(_FromRow):
    id: str
    parent_id: str | None
    depth: int
    category: str
    status: AgentStatus
    iterations: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


class IterationOut(_FromRow):
    id: str
    agent_id: str
    number: int
    status: IterationStatus
    attempt: int
    completed_task: bool
    summary: str | None
    error: str | None
    commit_sha: str | None
    files_changed: list[str]
    cost_usd: Decimal
    started_at: datetime | None
    finished_at: datetime | None


class ProjectOut(_FromRow):
    id: str
    name: str
    status: ProjectStatus
    status_reason: str | None
    """Why it is paused, failed or stopped, in words (``spent $0.1012 of $0.10``). A pause's code is
    ``pause_reason``, never repeated here (until issue #22 a pause's words began with it)."""
    pause_reason: PauseReason | None = None
    """What a paused project waits for, as a code (``budget_exceeded``); None unless paused."""
    workspace_sha: str | None
    budget_limit_usd: Decimal
    spent_usd: Decimal
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    # Set while its iterations wait and no live worker consumes their queue (a no_workers event).
    waiting_for_worker_since: datetime | None = None
    # Where its workspace started, for a project submitted from a repository (``--repo``).
    source_repo: str | None = None
    source_ref: str | None = None
    source_commit: str | None = None


class MemorySizeOut(BaseModel):
    """How much a project's memory bank holds (``raas status``)."""

    bank: str
    shared: bool
    """Shared by the tenant's projects (raas.toml ``[memory] scope = "tenant"``)."""
    entries: int
    size_bytes: int
    conflicts: int


class DeliveryOut(_FromRow):
    """Where a project's work went on its remote (``raas status``): a task's branch, or the
    project's branch and its pull request."""

    kind: DeliveryKind
    task_key: str | None
    branch: str
    status: DeliveryStatus
    pushed_sha: str | None
    pull_request_url: str | None
    error: str | None


class ProjectDetail(ProjectOut):
    agents: list[AgentOut]
    iterations: list[IterationOut]
    input_tokens: int
    output_tokens: int
    last_event_seq: int
    memory: MemorySizeOut | None = None
    deliveries: list[DeliveryOut] = Field(default_factory=list)


class WorkspaceReport(BaseModel):
    """What the coordinator answers when an iteration's commits are pushed back."""

    sha: str
    files_changed: list[str]


class ErrorOut(BaseModel):
    """The body of every error answer: the error's class and a one-line message saying what to do."""

    error: str
    detail: str


class AgentNode(BaseModel):
    """One agent of a project's tree, as the views of the tree show it: the transcript
    (:class:`orchestrator.transcripts.model.TranscriptAgent`) and ``raas graph``
    (:class:`orchestrator.queries.graph.GraphAgent`) add what each shows beside."""

    id: str
    category: str
    depth: int
    status: AgentStatus
    task: str | None = None
    """The key of the agent's task, if it works one."""
    iterations: int = 0


class MemoryValueOut(BaseModel):
    """One current value of a memory key, with its writer: several when writers did not see
    each other's values (the key is in conflict)."""

    version: int
    value: str
    tags: list[str]
    project_id: str
    agent_id: str
    agent_category: str | None = None
    iteration: int | None = None
    """The writer's iteration (its number)."""
    written_at: datetime


class MemoryEntryOut(BaseModel):
    """A key of a memory bank: its current values, and its rank when it answers a search."""

    key: str
    version: int
    """The number of the key's latest write."""
    conflict: bool
    values: list[MemoryValueOut]
    updated_at: datetime
    rank: float | None = None
    """How well it matches the search (higher is better): Postgres ts_rank, SQLite -bm25."""


class AgentMessageOut(_FromRow):
    """A message from one agent to another, as its recipient's next iteration reads it."""

    id: int
    sender_id: str
    sender_category: str
    recipient_id: str
    broadcast: bool
    text: str
    created_at: datetime
