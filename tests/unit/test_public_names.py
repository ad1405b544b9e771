"""The public names of the packages split from one module: each __init__ re-exports what the
module held, so the split broke no import (``from shared.models import Project`` still works)."""

from __future__ import annotations

import pytest

import shared.models
import shared.project_config

pytestmark = pytest.mark.unit

MODELS = [
    "UNFINISHED_SQL", "Agent", "AgentMessage", "AgentStatus", "ApiToken", "Base", "CredentialKind",
    "Delivery", "DeliveryKind", "DeliveryStatus", "ErrorKind", "Event", "GitCredential", "Iteration",
    "IterationStatus", "LedgerEntry", "LedgerKind", "MemoryBank", "MemoryEntry", "MemoryVersion",
    "MemoryView", "Message", "Money", "PauseReason", "Project", "ProjectStatus", "Task", "TaskStatus",
    "Tenant", "new_id", "unfinished", "utcnow",
    # issue #24, triggers
    "CatchUp", "OnActive", "RunStatus", "Trigger", "TriggerRun", "TriggerSource", "TriggerStatus",
    # issue #25, the team loop
    "Approval", "ApprovalAction", "ApprovalPoint", "ApprovalStatus", "FollowStatus", "PersonMessage",
    "PrFollow", "PrRound",
    # issue #24, notifications
    "Notification", "NotificationMedium", "NotificationStatus", "Subscription", "SubscriptionStatus",
]  # fmt: skip
PROJECT_CONFIG = [
    "DEFAULT_IGNORE", "BreakerConfig", "BudgetConfig", "DeliveryConfig", "MemoryConfig", "ProjectConfig",
    "RateLimitConfig", "SandboxConfig", "SourceConfig", "describe_validation_error", "parse_project_config",
]  # fmt: skip
TABLES = [
    "agent_messages", "agents", "api_tokens", "budget_ledger", "deliveries", "events", "git_credentials",
    "iterations", "memory_banks", "memory_entries", "memory_versions", "memory_views", "messages",
    "projects", "tasks", "tenants",
    "trigger_runs", "triggers",  # issue #24
    "approvals", "person_messages", "pr_follows", "pr_rounds",  # issue #25
    "notification_subscriptions", "notifications",  # issue #24
    "dashboard_sessions",  # issue #28
    "eval_attempts", "eval_checks", "eval_runs",  # issue #27
    "cluster_facts", "leases", "workspace_heads", "workspace_increments",  # issue #29
]  # fmt: skip


def test_shared_models_exports_every_name_the_module_held() -> None:
    assert sorted(shared.models.__all__) == sorted(MODELS)
    assert all(hasattr(shared.models, name) for name in MODELS)


def test_importing_shared_models_registers_every_table() -> None:
    assert sorted(shared.models.Base.metadata.tables) == sorted(TABLES)


def test_shared_project_config_exports_every_name_the_module_held() -> None:
    assert sorted(shared.project_config.__all__) == sorted(PROJECT_CONFIG)
    assert all(hasattr(shared.project_config, name) for name in PROJECT_CONFIG)
