"""The tables of raas.toml, one model each: ``[budget]``, ``[sandbox]``, ``[circuit_breaker]``,
``[rate_limit]``, ``[memory]``, ``[source]``, ``[delivery]`` and ``[approvals]``."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

from shared.git_refs import DEFAULT_BRANCH_TEMPLATE, check_branch_template

_SIZE = re.compile(r"^\d+(\.\d+)?[bkmg]?$", re.IGNORECASE)


class Strict(BaseModel):
    """A table of raas.toml: a key it does not define is an error naming the key."""

    model_config = ConfigDict(extra="forbid")


class BudgetConfig(Strict):
    limit_usd: Decimal = Field(
        default=Decimal("5"), ge=0, le=Decimal("99999999"), description="Hard spending limit in USD."
    )
    warning_threshold: float = Field(
        default=0.8, gt=0, le=1, description="Fraction of the limit at which budget_warning fires."
    )


class SandboxConfig(Strict):
    memory: str = Field(default="1g", description='Container memory limit, a Docker size ("512m", "2g").')
    cpus: float = Field(default=1.0, gt=0, description="CPU limit (cores) of the iteration's container.")
    pids: int = Field(default=256, ge=16, description="Maximum number of processes in the container.")
    network: bool = Field(default=False, description="Allow network access from the container.")
    command_timeout_s: float = Field(default=120.0, gt=0, description="Timeout of one bash command.")
    output_limit_bytes: int = Field(
        default=30_000, ge=1000, description="Tool output beyond this is cut (with a note)."
    )

    @field_validator("memory")
    @classmethod
    def _memory_is_a_size(cls, value: str) -> str:
        if not _SIZE.match(value):
            msg = f'{value!r} is not a size (e.g. "512m", "1g")'
            raise ValueError(msg)
        return value


class BreakerConfig(BaseModel):
    """``[circuit_breaker]`` in raas.toml; defaults are the ones ralph-claude-code users settled on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_consecutive_failures: int = Field(
        default=5, ge=1, description="Open after this many failed iterations in a row."
    )
    max_no_progress: int = Field(
        default=3,
        ge=1,
        description="Open after this many iterations in a row that changed nothing in the workspace "
        "(commits made by the agent count as changes; failed iterations are counted as failures).",
    )
    max_same_error: int = Field(
        default=5,
        ge=1,
        description="Open after the same error (digits, hex and paths ignored) this many times "
        "since the workspace last changed.",
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Wall-clock limit of the whole run, in seconds; none by default. "
        "No cooldown recovers from it: `raas resume` grants another timeout_s.",
    )
    cooldown_s: float = Field(
        default=1800, ge=0, description="Seconds the breaker stays open before one trial iteration."
    )


class RateLimitConfig(Strict):
    calls_per_hour: int | None = Field(default=None, gt=0, description="LLM calls of this project per hour.")
    tokens_per_hour: int | None = Field(
        default=None, gt=0, description="Input plus output tokens of this project per hour."
    )


class MemoryConfig(Strict):
    """``[memory]`` in raas.toml: the memory bank the agents' memory tools read and write."""

    scope: Literal["project", "tenant"] = Field(
        default="project",
        description='"project": the project\'s own bank; "tenant": one bank shared by every project of '
        "the tenant that also says so (projects submitted with the cluster token share the cluster's).",
    )
    max_entry_bytes: int = Field(
        default=16_384,
        ge=1,
        le=1_048_576,
        description="Largest value of one key, in UTF-8 bytes; a larger write is refused with an error "
        "result the model reads.",
    )
    max_entries: int = Field(
        default=500,
        ge=1,
        le=100_000,
        description="Keys a bank holds at most (a shared bank: the writing project's limit); a write "
        "of a new key beyond it is refused with an error result, overwriting a key still works.",
    )


class SourceConfig(Strict):
    """``[source]`` in raas.toml: the repository the project's workspace starts from."""

    repo: str | None = Field(
        default=None,
        max_length=2000,
        description="Git URL (https://, http://, ssh:// or user@host:path) cloned into the workspace; "
        "its credential is the tenant's (`raas credentials set HOST`), never part of the URL.",
    )
    ref: str | None = Field(
        default=None,
        max_length=255,
        description="The branch to start from; the remote's default branch when not given.",
    )


class DeliveryConfig(Strict):
    """``[delivery]`` in raas.toml: where the project's work goes back to (DESIGN.md rule 10)."""

    remote: str | None = Field(
        default=None,
        max_length=2000,
        description="Git URL the branches are pushed to; the [source] repo when not given (no delivery "
        "when neither is set). Its credential is the tenant's, as for [source].",
    )
    branch: str = Field(
        default=DEFAULT_BRANCH_TEMPLATE,
        max_length=200,
        description="Template of each task's branch, with {project} (the project's id) and {task} (the "
        "task's id); the project's own branch, which the pull request comes from, has {task} = \"project\".",
    )
    base: str | None = Field(
        default=None,
        max_length=255,
        description="The branch the pull request is opened against; the [source] ref when not given.",
    )
    pull_request: Literal["off", "draft", "ready"] = Field(
        default="off",
        description='"off": push branches only; "draft" or "ready": open (or update) one pull request '
        "from the project's branch when it ends. A run that ends early always opens a draft.",
    )
    follow: bool = Field(
        default=True,
        description="With a pull request (on by default): once it is open the project stays `delivered` and "
        "follows it; "
        "a failed required check or a review asking for changes starts a round (the builder works on "
        "the same branch, its commits update the same pull request); merged or closed ends it.",
    )
    max_rounds: int = Field(
        default=3,
        ge=1,
        le=50,
        description="Rounds per followed pull request; the next failure ends the follow.",
    )
    round_budget_usd: Decimal | None = Field(
        default=None,
        gt=0,
        le=Decimal("99999999"),
        description="The most one pull request round may spend (the project's limit is lowered to it "
        "while the round runs); reached, the round ends, its work is pushed and the follow ends with one "
        "comment. None: the project's own limit only.",
    )
    pr_budget_usd: Decimal | None = Field(
        default=None,
        gt=0,
        le=Decimal("99999999"),
        description="The most all rounds of the followed pull request may spend together, counted from "
        "its opening; reached, the follow ends with one comment. None: the project's own limit only.",
    )
    follow_hours: float = Field(
        default=168.0,
        gt=0,
        le=24 * 365,
        description="How long after the pull request opened it is followed; then the follow ends with "
        "one comment (a round running then finishes first).",
    )
    poll_s: float = Field(
        default=60.0,
        ge=1,
        le=86400,
        description="How often the coordinator asks the forge about a followed pull request when no "
        "webhook trigger of the repository tells it (conditional requests with ETags: an unchanged "
        "answer is a 304 and costs no rate limit on GitHub). With a trigger taking review_comment, "
        "reviews come by webhook and only checks and state are polled.",
    )
    forge: Literal["github", "gitlab"] | None = Field(
        default=None,
        description="The forge whose REST API opens the pull request; guessed from the remote's host "
        "(github.com, or a host named gitlab...) when not given.",
    )
    api_url: str | None = Field(
        default=None,
        max_length=2000,
        description="The forge's REST API root; https://api.github.com for github.com, "
        "https://HOST/api/v4 for GitLab, when not given.",
    )

    @field_validator("remote")
    @classmethod
    def _remote_carries_no_credential(cls, value: str | None) -> str | None:
        if value is not None and "://" in value:
            parts = urlsplit(value)
            if parts.password is not None or (parts.username is not None and parts.scheme != "ssh"):
                msg = "the URL carries a user name or password; give it without and store the credential "
                msg += "with `raas credentials set HOST`"
                raise ValueError(msg)
        return value

    @field_validator("branch")
    @classmethod
    def _branch_makes_ref_names(cls, value: str) -> str:
        problem = check_branch_template(value)
        if problem is not None:
            msg = f"{problem} (see git check-ref-format)"
            raise ValueError(msg)
        return value


class ApprovalsConfig(Strict):
    """``[approvals]`` in raas.toml: where a project waits for a person (DESIGN.md rules 12, 13).

    Every approval of the project (a ``kind = "approval"`` task, the diff before delivery) waits
    without holding a worker until a person decides it (``raas approve``) or its deadline passes.
    """

    diff: bool = Field(
        default=False,
        description="Wait for a person to approve the finished work before it is completed and "
        "delivered; rejected, the builder works on with the reviewer's comment.",
    )
    plan: bool = Field(
        default=False,
        description='With workflow = "planned": wait for a person to approve the planner\'s task graph '
        "before its tasks start; rejected, the planner plans again with the reviewer's comment.",
    )
    spend_usd: Decimal | None = Field(
        default=None,
        gt=0,
        le=Decimal("99999999"),
        description="Once the project has spent this many USD, its further iterations wait for a person "
        "to approve spending more; rejected, the project stops. None: no such approval.",
    )
    deadline_s: int | None = Field(
        default=None,
        ge=1,
        le=30 * 24 * 3600,
        description="Seconds an approval waits for a person before its default applies; none: it waits "
        "until decided.",
    )
    default: Literal["approve", "reject", "pause"] = Field(
        default="pause",
        description='What the deadline decides: "approve", "reject" (the agent works on), or "pause" '
        "(the project pauses; `raas resume` waits again).",
    )
    approvers: list[str] | None = Field(
        default=None,
        max_length=100,
        description='Who may decide, as the API names callers ("token:<id>", "operator"); none: any '
        "token of the project's tenant.",
    )
