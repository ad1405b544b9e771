"""A project's own settings: ``raas.toml`` in its directory, validated by pydantic.

Every field has ``extra="forbid"`` so a misspelt key is an error that names it, not a setting
silently ignored.
"""

from __future__ import annotations

import re
import tomllib
from decimal import Decimal
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from shared.categories import DEFAULT_CATEGORIES, SANDBOX_TOOLS, CategoryConfig, Role, resolve
from shared.dag import TaskSpec, validate_dag
from shared.errors import InvalidInput
from shared.git_refs import DEFAULT_BRANCH_TEMPLATE, check_branch_template
from shared.harnesses import DEFAULT_HARNESS, HARNESSES, HarnessConfig, HarnessName
from shared.pricing import ModelPrice, find_price

_SIZE = re.compile(r"^\d+(\.\d+)?[bkmg]?$", re.IGNORECASE)
# Build litter an agent leaves behind (a venv, bytecode, installed packages, test caches).
DEFAULT_IGNORE = ("__pycache__/", "*.pyc", ".venv/", "node_modules/", ".pytest_cache/")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BudgetConfig(_Strict):
    limit_usd: Decimal = Field(
        default=Decimal("5"), ge=0, le=Decimal("99999999"), description="Hard spending limit in USD."
    )
    warning_threshold: float = Field(
        default=0.8, gt=0, le=1, description="Fraction of the limit at which budget_warning fires."
    )


class SandboxConfig(_Strict):
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


class RateLimitConfig(_Strict):
    calls_per_hour: int | None = Field(default=None, gt=0, description="LLM calls of this project per hour.")
    tokens_per_hour: int | None = Field(
        default=None, gt=0, description="Input plus output tokens of this project per hour."
    )


class MemoryConfig(_Strict):
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


class SourceConfig(_Strict):
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


# Roles whose agents no CLI harness can run, and why (see shared.harnesses).
_API_ONLY = {
    Role.PLANNER: 'a planner needs submit_plan, which no agent CLI has; remove harness or set it to "api"',
    Role.VALIDATOR: "a validator runs check_command, not a model; remove harness",
}


class DeliveryConfig(_Strict):
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


class ProjectConfig(_Strict):
    name: str | None = Field(
        default=None, max_length=200, description="Display name; defaults to the directory name."
    )
    workflow: Literal["ralph", "pipeline", "planned"] = Field(
        default="ralph",
        description='"ralph": one builder loop per task; "pipeline": research subagents, a builder, then '
        'the validator gate per task; "planned": a planner writes the tasks first.',
    )
    tasks: list[TaskSpec] = Field(
        default_factory=list, description="[[tasks]]: the task DAG; none means one task, the prompt itself."
    )
    scud_file: str | None = Field(
        default=None,
        description="A SCUD task graph in the workspace; .scud/tasks/tasks.scg is used when present "
        "and [[tasks]] is empty. Finished tasks are marked done in it.",
    )
    categories: dict[str, CategoryConfig] = Field(
        default_factory=dict, description="[categories.NAME]: agent categories, over the defaults."
    )
    check_command: str | None = Field(
        default=None, description="The command the validator runs in the sandbox; exit 0 passes the task."
    )
    research: list[str] = Field(
        default_factory=lambda: ["searcher", "analyzer"],
        description="Parallel subagents a pipeline task starts with.",
    )
    validator: str = Field(
        default="validator",
        description="The category whose agent gates each pipeline task; its role must be validator.",
    )
    max_subagent_depth: int = Field(default=1, ge=0, description="How deep subagents may spawn subagents.")
    subagent_max_iterations: int = Field(default=3, ge=1, description="Iterations a subagent gets at most.")
    max_parallel: int = Field(
        default=4, ge=1, description="Iterations of this project queued or running at once (fairness)."
    )
    model: str = Field(default="claude-sonnet-4-6", description="Claude model of the agents.")
    harness: HarnessName = Field(
        default=DEFAULT_HARNESS,
        description='What runs the agents of builder and research categories: "api" (the built-in loop), '
        '"claude-code", "codex" or "opencode" (the agent CLI, pinned, in the sandbox); a category\'s '
        "harness wins.",
    )
    harnesses: dict[str, HarnessConfig] = Field(
        default_factory=dict,
        description="[harnesses.NAME]: what is tuned of each agent CLI (NAME: claude-code, codex, opencode).",
    )
    max_iterations: int = Field(
        default=10, ge=1, description="The project fails if no iteration completes the task by then."
    )
    max_turns: int = Field(default=30, ge=1, description="LLM calls per iteration at most (turn cap).")
    max_tokens: int = Field(default=8192, ge=1, description="max_tokens of each LLM call.")
    context: Literal["fresh", "continue"] = Field(
        default="fresh",
        description='"fresh": each iteration starts anew (Ralph); "continue": keep the conversation.',
    )
    context_window_tokens: int = Field(
        default=150_000, ge=1000, description='With context = "continue", history is cut to about this.'
    )
    completion_marker: str | None = Field(
        default=None, description="Text that, ending the agent's turn, also counts as task_complete."
    )
    completion_threshold: int = Field(
        default=1, ge=1, description="Consecutive completing iterations needed to complete the task."
    )
    denylist: list[str] = Field(
        default_factory=list, description="Regexes of bash commands refused (a second line of defence)."
    )
    default_ignore: list[str] = Field(
        default_factory=lambda: list(DEFAULT_IGNORE),
        description="Gitignore patterns kept out of the agents' commits while the workspace has no "
        ".gitignore of its own (once it has one, that one alone decides); [] commits everything.",
    )
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    circuit_breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    rate_limit: RateLimitConfig = Field(default_factory=RateLimitConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    source: SourceConfig = Field(default_factory=SourceConfig)
    delivery: DeliveryConfig = Field(default_factory=DeliveryConfig)
    pricing: dict[str, ModelPrice] = Field(
        default_factory=dict, description="Price overrides per model, USD per million tokens."
    )

    @field_validator("default_ignore")
    @classmethod
    def _one_pattern_each(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if "\n" in pattern or "\r" in pattern:
                msg = f"{pattern!r} is not one gitignore pattern: give each line as its own string"
                raise ValueError(msg)
        return patterns

    @field_validator("harnesses")
    @classmethod
    def _known_harnesses(cls, tables: dict[str, HarnessConfig]) -> dict[str, HarnessConfig]:
        for name in tables:
            if name not in HARNESSES:
                msg = f"unknown harness {name!r}; choices: {', '.join(HARNESSES)}"
                raise ValueError(msg)
            if tables[name].allowed_tools is not None and not HARNESSES[name].limits_tools:
                msg = f"{name}.allowed_tools: {name} cannot limit its own tools; remove allowed_tools"
                raise ValueError(msg)
        return tables

    @model_validator(mode="after")
    def _consistent(self) -> ProjectConfig:
        self._check_harnesses()
        in_use = {*DEFAULT_CATEGORIES, *self.categories}
        tables: list[CategoryConfig | HarnessConfig] = [*self.categories.values(), *self.harnesses.values()]
        models = {self.model, *(t.model for t in tables if t.model)}
        for model in models | {self.model_for(name) for name in in_use}:
            if find_price(model, self.pricing) is None:
                msg = f"model {model!r} has no price; add a [pricing.{model!r}] table"
                raise ValueError(msg)
        known = {*DEFAULT_CATEGORIES, *self.categories}
        for where, name in [
            *((f"task {t.id!r}", t.category) for t in self.tasks),
            *(("research", r) for r in self.research),
        ]:
            if name not in known:
                msg = f"{where}: unknown category {name!r}; known: {', '.join(sorted(known))}"
                raise ValueError(msg)
        for name, category in self.categories.items():
            unknown = set(category.tools or ()) - set(SANDBOX_TOOLS)
            if unknown:
                msg = f"categories.{name}.tools: unknown tool(s) {', '.join(sorted(unknown))}"
                raise ValueError(msg)
        if self.validator not in known or self.category(self.validator).role is not Role.VALIDATOR:
            msg = f"validator: category {self.validator!r} is not one whose role is validator"
            raise ValueError(msg)
        if self.workflow == "pipeline" and not self.check_command:
            msg = 'workflow = "pipeline" needs check_command, the command the validator runs'
            raise ValueError(msg)
        if self.workflow == "planned" and self.tasks:
            msg = 'workflow = "planned" plans its own tasks; remove the [[tasks]] tables'
            raise ValueError(msg)
        validate_dag(self.tasks)
        return self

    def _check_harnesses(self) -> None:
        """A harness only on categories whose role and tools it can honour (see shared.harnesses)."""
        for name, category in self.categories.items():
            if category.harness not in (None, "api") and self.role_of(name) in _API_ONLY:
                msg = f"categories.{name}.harness: {_API_ONLY[self.role_of(name)]}"
                raise ValueError(msg)
            harness = HARNESSES.get(self.harness_for(name))
            lacking = set(category.tools or ()) - set(harness.tools if harness else ())
            if harness is not None and lacking:
                msg = (
                    f"categories.{name}.tools: the {harness.name} harness has no {', '.join(sorted(lacking))}"
                )
                raise ValueError(msg)

    def category(self, name: str) -> CategoryConfig:
        return resolve(name, self.categories)

    def role_of(self, category: str) -> Role:
        return self.category(category).role

    def categories_in(self, role: Role) -> list[str]:
        """The names of the categories, built-in and the project's own, that have ``role``."""
        return sorted(name for name in {*DEFAULT_CATEGORIES, *self.categories} if self.role_of(name) is role)

    def harness_for(self, category: str) -> str:
        """The harness that runs agents of ``category``: its own, else the project's (planner and
        validator categories run on api whatever the project says; see :mod:`shared.harnesses`)."""
        if self.role_of(category) in _API_ONLY:
            return "api"
        return self.category(category).harness or self.harness

    def harnesses_in_use(self) -> set[str]:
        """The harnesses this project's agents may run under (every category it could use)."""
        return {self.harness_for(name) for name in {*DEFAULT_CATEGORIES, *self.categories}}

    def harness_config_for(self, category: str) -> HarnessConfig:
        """``[harnesses.NAME]`` of the category's harness with its model and max_turns filled in."""
        table = self.harnesses.get(self.harness_for(category), HarnessConfig())
        return table.model_copy(
            update={"model": self.model_for(category), "max_turns": table.max_turns or self.max_turns}
        )

    def model_for(self, category: str) -> str:
        """The model agents of ``category`` call: the harness table's, the category's, the harness's
        own default (codex: an OpenAI model), then the project's."""
        harness = self.harness_for(category)
        table = self.harnesses.get(harness)
        if table is not None and table.model:
            return table.model
        default = HARNESSES[harness].default_model if harness in HARNESSES else None
        return self.category(category).model or default or self.model


def describe_validation_error(source: str, error: ValidationError) -> str:
    """One line naming the first bad key, what was wrong and what was given."""
    first = error.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    where = f"{source}: {loc}: " if loc else f"{source}: "
    given = first.get("input")
    # A URL is never repeated: it may carry a credential.
    hidden = (
        first["type"] == "missing" or isinstance(given, dict) or first["loc"][-1:] in (("remote",), ("repo",))
    )
    shown = "" if hidden else f" (got {given!r})"
    text = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        keys = _keys_at(first["loc"][:-1])
        text = f"unknown key; keys: {', '.join(keys)}" if keys else text
    return f"{where}{text}{shown}"


def _keys_at(loc: tuple[int | str, ...]) -> list[str]:
    """The keys the table at ``loc`` (a path into raas.toml) may hold, to name them in an error."""
    model: Any = ProjectConfig
    for part in loc:
        if isinstance(model, type) and issubclass(model, BaseModel):
            field = model.model_fields.get(str(part))
            model = field.annotation if field else None
        else:  # dict[str, X] or list[X]: the key or the index selects an X
            model = get_args(model)[-1] if get_origin(model) in (dict, list) else None
        if get_origin(model) in (Union, UnionType):  # X | None
            model = next((a for a in get_args(model) if a is not type(None)), None)
    if isinstance(model, type) and issubclass(model, BaseModel):
        return list(model.model_fields)
    return []


def parse_project_config(text: str, source: str = "raas.toml") -> ProjectConfig:
    """Parse and validate raas.toml text.

    Raises:
        InvalidInput: naming the bad key and the expected type.
    """
    if "\x00" in text:
        msg = f"{source}: contains a NUL byte; it must be plain text"
        raise InvalidInput(msg)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        msg = f"{source}: not valid TOML: {exc}"
        raise InvalidInput(msg) from exc
    try:
        return ProjectConfig.model_validate(data)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(source, exc)) from exc
    except InvalidInput as exc:  # the task graph's own one-line messages
        msg = f"{source}: {exc}"
        raise InvalidInput(msg) from exc
