"""The SQLAlchemy models: everything that outlives a process lives here.

Ids are short random hex strings so they can travel in URLs, Celery arguments and log lines.
The same status enums type the columns, the API schemas and the CLI output.

One module per concept: ``base`` (the declarative base, ids, timestamps, money), ``tenancy``
(tenants, tokens, git credentials), ``projects`` (projects and tasks), ``agents`` (agents, their
iterations and messages), ``history`` (events and the budget ledger), ``coordination`` (the
memory bank, messages between agents), ``deliveries`` and ``team`` (what people say to agents,
approvals, followed pull requests and their rounds). Import from here: the names below are
the package's public face (a test pins them), and importing it registers every table on
``Base.metadata``.
"""

from shared.models import (
    cluster,  # noqa: F401  (registers leases, cluster_facts; names in shared.models.cluster)
    evals,  # noqa: F401  (registers eval_runs, eval_attempts; names in shared.models.evals)
    workspaces,  # noqa: F401  (registers workspace_heads and workspace_increments)
)
from shared.models.agents import (
    UNFINISHED_SQL,
    Agent,
    AgentStatus,
    ErrorKind,
    Iteration,
    IterationStatus,
    Message,
    unfinished,
)
from shared.models.base import Base, Money, new_id, utcnow
from shared.models.coordination import AgentMessage, MemoryBank, MemoryEntry, MemoryVersion, MemoryView
from shared.models.deliveries import Delivery, DeliveryKind, DeliveryStatus
from shared.models.history import Event, LedgerEntry, LedgerKind
from shared.models.notifications import (
    Notification,
    NotificationMedium,
    NotificationStatus,
    Subscription,
    SubscriptionStatus,
)
from shared.models.projects import PauseReason, Project, ProjectStatus, Task, TaskStatus
from shared.models.team import (
    Approval,
    ApprovalAction,
    ApprovalPoint,
    ApprovalStatus,
    FollowStatus,
    PersonMessage,
    PrFollow,
    PrRound,
)
from shared.models.tenancy import ApiToken, CredentialKind, GitCredential, Tenant
from shared.models.triggers import (
    CatchUp,
    OnActive,
    RunStatus,
    Trigger,
    TriggerRun,
    TriggerSource,
    TriggerStatus,
)

__all__ = [
    "UNFINISHED_SQL",
    "Agent",
    "AgentMessage",
    "AgentStatus",
    "ApiToken",
    "Approval",
    "ApprovalAction",
    "ApprovalPoint",
    "ApprovalStatus",
    "Base",
    "CatchUp",
    "CredentialKind",
    "Delivery",
    "DeliveryKind",
    "DeliveryStatus",
    "ErrorKind",
    "FollowStatus",
    "Event",
    "GitCredential",
    "Iteration",
    "IterationStatus",
    "LedgerEntry",
    "LedgerKind",
    "MemoryBank",
    "MemoryEntry",
    "MemoryVersion",
    "MemoryView",
    "Message",
    "Money",
    "OnActive",
    "PauseReason",
    "PersonMessage",
    "PrFollow",
    "PrRound",
    "Project",
    "ProjectStatus",
    "RunStatus",
    "Task",
    "TaskStatus",
    "Tenant",
    "Trigger",
    "TriggerRun",
    "TriggerSource",
    "TriggerStatus",
    "new_id",
    "unfinished",
    "utcnow",
    # issue #24, notifications
    "Notification",
    "NotificationMedium",
    "NotificationStatus",
    "Subscription",
    "SubscriptionStatus",
]
