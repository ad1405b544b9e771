"""What each event says: one model per event type, read and written through the same class.

A writer builds the payload and hands it over (``events.record``, ``events.emit``,
``Outbox.event``, a worker's ``emit``); the event's type is the payload's ``TYPE``. A reader
turns an event back into its payload with :func:`payload` and branches on the class. The row
and the wire hold :meth:`EventData.data`: the payload as JSON with the fields its writer left out
left out, so each type's stored JSON is what it has always been.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import PlainSerializer

from shared import events
from shared.events import EventData
from shared.models import ErrorKind, PauseReason
from shared.schemas import EventOut

# Written as Python's isoformat ("+00:00"), as this event always was, not pydantic's "Z".
IsoDatetime = Annotated[datetime, PlainSerializer(lambda moment: moment.isoformat(), return_type=str)]


class ProjectCreated(EventData):
    TYPE = events.PROJECT_CREATED
    name: str


class ProjectStarted(EventData):
    TYPE = events.PROJECT_STARTED
    workflow: str


class ProjectPaused(EventData):
    TYPE = events.PROJECT_PAUSED
    NOTIFY = True
    reason: PauseReason
    """What resuming waits for."""
    message: str


class ProjectResumed(EventData):
    TYPE = events.PROJECT_RESUMED
    by: str


class ProjectStopped(EventData):
    TYPE = events.PROJECT_STOPPED
    NOTIFY = True
    reason: str


class ProjectCompleted(EventData):
    TYPE = events.PROJECT_COMPLETED
    NOTIFY = True
    tasks: int


class ProjectFailed(EventData):
    TYPE = events.PROJECT_FAILED
    NOTIFY = True
    reason: str
    task: str


class IterationStarted(EventData):
    TYPE = events.ITERATION_STARTED
    number: int
    attempt: int
    worker: str | None


class IterationComplete(EventData):
    TYPE = events.ITERATION_COMPLETE
    number: int
    completed_task: bool
    summary: str | None
    files_changed: list[str]
    commit: str | None


class IterationError(EventData):
    TYPE = events.ITERATION_ERROR
    number: int
    error: str
    kind: ErrorKind | None


class AgentOutputChunk(EventData):
    """Text the model streamed, coalesced into chunks (the one high-volume event)."""

    TYPE = events.AGENT_OUTPUT_CHUNK
    text: str


class AgentToolCall(EventData):
    TYPE = events.AGENT_TOOL_CALL
    tool: str
    input: Any
    """As the model sent it: usually an object, but nothing checked it yet."""
    tool_use_id: str


class ToolExecuted(EventData):
    """A tool's result; the validator's check command gives ``command`` and ``exit_code``
    instead of a ``tool_use_id``."""

    TYPE = events.TOOL_EXECUTED
    tool: str
    tool_use_id: str | None = None
    command: str | None = None
    exit_code: int | None = None
    is_error: bool
    output: str


class LlmRetry(EventData):
    """An LLM call tried again: after an error (``error``, ``attempt``, ``delay_s``) or after a
    reply cut off at max_tokens with tool calls (``tool_calls_discarded``, the new ``max_tokens``)."""

    TYPE = events.LLM_RETRY
    reason: str
    tool_calls_discarded: int | None = None
    max_tokens: int | None = None
    error: str | None = None
    attempt: int | None = None
    delay_s: float | None = None


class BudgetWarning(EventData):
    TYPE = events.BUDGET_WARNING
    NOTIFY = True
    spent_usd: Decimal
    limit_usd: Decimal


class BudgetExceeded(EventData):
    TYPE = events.BUDGET_EXCEEDED
    spent_usd: Decimal
    limit_usd: Decimal


class ApiKeyRequired(EventData):
    TYPE = events.API_KEY_REQUIRED
    error: str | None


class PromptUpdated(EventData):
    TYPE = events.PROMPT_UPDATED
    chars: int


class BudgetChanged(EventData):
    TYPE = events.BUDGET_CHANGED
    limit_usd: Decimal


TripReason = Literal["consecutive_failures", "no_progress", "same_error", "timeout", "half_open_failed"]


class Trip(EventData):
    """Why the circuit breaker opened (orchestrator.scheduling.breaker decides it)."""

    TYPE = events.CIRCUIT_BREAKER_TRIGGERED
    reason: TripReason
    numbers: dict[str, int | float]
    message: str


class SubagentSpawned(EventData):
    TYPE = events.SUBAGENT_SPAWNED
    agent_id: str
    category: str
    parallel: bool


class TaskValidated(EventData):
    TYPE = events.TASK_VALIDATED
    task: str
    passed: bool


class RateLimitWait(EventData):
    TYPE = events.RATE_LIMIT_WAIT
    wait_s: float
    limit: str


class NoWorkers(EventData):
    """No live worker consumes ``queue`` while the project's iterations wait there."""

    TYPE = events.NO_WORKERS
    since: IsoDatetime
    queue: str


class WorkersBack(EventData):
    TYPE = events.WORKERS_BACK
    workers: list[str]
    waited_s: float


class MemoryWritten(EventData):
    """An agent wrote a key of its project's memory bank (the value is in the bank)."""

    TYPE = events.MEMORY_WRITTEN
    key: str
    version: int
    bank: str
    size_bytes: int
    tags: list[str]
    conflict: bool
    """The write did not see another current value of the key: both are kept, the key is in conflict."""
    preview: str
    tool_use_id: str


class MessageSent(EventData):
    """An agent sent a message; each recipient reads it in its next iteration."""

    TYPE = events.MESSAGE_SENT
    to: str
    """As the sender addressed it: parent, broadcast, or an agent id."""
    recipients: list[str]
    text: str
    tool_use_id: str


class DeliveryPushed(EventData):
    """A branch is on the remote at ``sha`` (pushed without force)."""

    TYPE = events.DELIVERY_PUSHED
    branch: str
    sha: str
    task: str | None
    """The task whose branch it is; None for the project's branch."""


class PullRequestOpened(EventData):
    TYPE = events.PULL_REQUEST_OPENED
    branch: str
    number: int
    url: str
    draft: bool


class PullRequestUpdated(EventData):
    """The open pull request got this round's body, and a comment saying why the run ended."""

    TYPE = events.PULL_REQUEST_UPDATED
    branch: str
    number: int
    url: str
    draft: bool = False
    """Whether it is still a draft after this round (a completed round marks it ready where it can)."""


class DeliveryFailed(EventData):
    """A delivery step failed; what is already on the remote stays, ``raas deliver ID`` tries again."""

    TYPE = events.DELIVERY_FAILED
    branch: str
    task: str | None
    step: Literal["push", "pull_request"]
    reason: str


class PersonSaid(EventData):
    """A person said something to the project's agent (``raas say``): shown as from a person."""

    TYPE = events.PERSON_SAID
    message_id: str
    author: str
    text: str
    agent: str | None = None
    """The agent it is for; None: the first agent of the project to reach a turn boundary."""
    now: bool = False


class ApprovalWaiting(EventData):
    """An approval waits for a person (``raas approve ID``); at its deadline, its default applies."""

    TYPE = events.APPROVAL_WAITING
    NOTIFY = True
    approval_id: str
    point: Literal["task", "plan", "diff", "spend"]
    title: str
    deadline: IsoDatetime | None = None
    default: Literal["approve", "reject", "pause"]


class ApprovalDecided(EventData):
    TYPE = events.APPROVAL_DECIDED
    approval_id: str
    decision: Literal["approved", "rejected", "paused"]
    by: str
    """A token's name, or "deadline" when the default action applied."""
    comment: str | None = None


class ProjectDelivered(EventData):
    """The run ended with its pull request open; with ``following`` its checks and reviews start rounds."""

    TYPE = events.PROJECT_DELIVERED
    pull_request: int
    url: str
    following: bool


class RoundStarted(EventData):
    TYPE = events.ROUND_STARTED
    round: int
    max_rounds: int
    trigger: Literal["check_failed", "review"]
    summary: str
    """What started it, on one line (a check's name, a reviewer's comment count): untrusted text."""


class RoundFinished(EventData):
    TYPE = events.ROUND_FINISHED
    round: int
    sha: str | None = None
    replies: int = 0
    cost_usd: Decimal | None = None


class FollowEnded(EventData):
    TYPE = events.FOLLOW_ENDED
    reason: Literal["merged", "closed", "max_rounds", "budget", "timeout", "project"]
    detail: str


class TriggerRefused(EventData):
    """A trigger's delivery asked for a run its limits refuse (a day's budget, runs per hour or day, the
    tenant's total): recorded on the run's project, which is created failed and never started."""

    TYPE = events.TRIGGER_REFUSED
    NOTIFY = True
    trigger_id: str
    trigger: str
    run_id: str
    reason: str


#: Every event type's payload model, by type.
PAYLOADS: dict[str, type[EventData]] = {
    model.TYPE: model
    for model in (
        ProjectCreated, ProjectStarted, ProjectPaused, ProjectResumed, ProjectStopped,
        ProjectCompleted, ProjectFailed, IterationStarted, IterationComplete, IterationError,
        AgentOutputChunk, AgentToolCall, ToolExecuted, LlmRetry, BudgetWarning, BudgetExceeded,
        ApiKeyRequired, PromptUpdated, BudgetChanged, Trip, SubagentSpawned, TaskValidated,
        RateLimitWait, NoWorkers, WorkersBack, MemoryWritten, MessageSent, DeliveryPushed,
        PullRequestOpened, PullRequestUpdated, DeliveryFailed, TriggerRefused, PersonSaid, ApprovalWaiting,
        ApprovalDecided, ProjectDelivered, RoundStarted, RoundFinished, FollowEnded,
    )
}  # fmt: skip


#: The event types people may subscribe to (``raas notify add --events``): those whose model says
#: ``NOTIFY``. A new type joins by saying so in its model.
NOTIFIABLE: tuple[str, ...] = tuple(sorted(t for t, model in PAYLOADS.items() if model.NOTIFY))


def payload(event: EventOut) -> EventData | None:
    """The event's payload as its model; None for a type this version does not know."""
    model = PAYLOADS.get(event.type)
    return model.model_validate(event.data) if model is not None else None
