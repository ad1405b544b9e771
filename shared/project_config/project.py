"""The whole of raas.toml: the project's top-level keys, its tables, its categories, harnesses and
tasks, and the rules that hold between them (checked when it is validated)."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import Field, field_validator, model_validator

from shared.budget import DEFAULT_INPUT_TOKENS, FLOOR_OUTPUT_TOKENS, smallest_call_usd
from shared.categories import DEFAULT_CATEGORIES, CategoryConfig, Role, resolve
from shared.dag import TaskSpec, validate_dag
from shared.dialectic import ROTATED_BUILDER, ROTATED_REVIEWER, DialecticConfig, counterpart
from shared.harnesses import DEFAULT_HARNESS, HARNESSES, HarnessConfig, HarnessName
from shared.pricing import ModelPrice, find_price
from shared.project_config.environment import EnvironmentConfig
from shared.project_config.tables import (
    ApprovalsConfig,
    BreakerConfig,
    BudgetConfig,
    DeliveryConfig,
    MemoryConfig,
    RateLimitConfig,
    SandboxConfig,
    SourceConfig,
    Strict,
)
from shared.tool_names import SANDBOX_TOOLS

# Build litter an agent leaves behind (a venv, bytecode, installed packages, test caches).
DEFAULT_IGNORE = ("__pycache__/", "*.pyc", ".venv/", "node_modules/", ".pytest_cache/")

# Roles whose agents no CLI harness can run, and why (see shared.harnesses).
_API_ONLY = {
    Role.PLANNER: 'a planner needs submit_plan, which no agent CLI has; remove harness or set it to "api"',
    Role.VALIDATOR: "a validator runs check_command, not a model; remove harness",
}


class ProjectConfig(Strict):
    name: str | None = Field(
        default=None, max_length=200, description="Display name; defaults to the directory name."
    )
    workflow: Literal["ralph", "pipeline", "planned", "dialectic"] = Field(
        default="ralph",
        description='"ralph": one builder loop per task; "pipeline": research subagents, a builder, then '
        'the validator gate per task; "planned": a planner writes the tasks first; "dialectic": a '
        "reviewer on another model criticises each builder iteration ([dialectic]), check_command gates.",
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
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    dialectic: DialecticConfig = Field(default_factory=DialecticConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
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
        self._check_budget()
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
        if reserved := {ROTATED_BUILDER, ROTATED_REVIEWER} & known:
            msg = f"categories.{min(reserved)}: the name is the dialectic's rotating lead's; choose another"
            raise ValueError(msg)
        reviewer = self.dialectic.reviewer
        if reviewer not in known or self.category(reviewer).role is not Role.REVIEWER:
            msg = f"[dialectic] reviewer: category {reviewer!r} is not one whose role is reviewer"
            raise ValueError(msg)
        if self.workflow == "planned" and self.tasks:
            msg = 'workflow = "planned" plans its own tasks; remove the [[tasks]] tables'
            raise ValueError(msg)
        validate_dag(self.tasks)
        return self

    def _check_budget(self) -> None:
        """A limit that pays at least one floor-sized call of the agents that do the work (the
        builder categories), through their harness (its first request is its size): below the
        cheapest, not even one call could be made."""
        costs: dict[str, Decimal] = {}
        for name in self.categories_in(Role.BUILDER):
            model, harness = self.model_for(name), self.harness_for(name)
            price = find_price(model, self.pricing) or ModelPrice(input=0, output=0)
            tokens = HARNESSES[harness].first_request_tokens if harness in HARNESSES else DEFAULT_INPUT_TOKENS
            costs[f"{model} through {harness} ({tokens:,} tokens in"] = smallest_call_usd(price, tokens)
        if not costs:
            return
        call, smallest = min(costs.items(), key=lambda item: (item[1], item[0]))
        if self.budget.limit_usd < smallest:
            msg = (
                f"[budget] limit_usd = {self.budget.limit_usd} cannot pay one call of {call}, "
                f"{FLOOR_OUTPUT_TOKENS:,} out); the smallest limit that works is {smallest.normalize()}"
            )
            raise ValueError(msg)

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
        if name in (ROTATED_BUILDER, ROTATED_REVIEWER):
            return self._rotated(name)
        return resolve(name, self.categories)

    def _rotated(self, name: str) -> CategoryConfig:
        """The dialectic's rotating lead (``rotate = true``): the builder category with the reviewer's
        model and harness, or the reviewer with the builder's; tools, role and prompt stay."""
        builder, reviewer = "builder", self.dialectic.reviewer
        base, other = (builder, reviewer) if name == ROTATED_BUILDER else (reviewer, builder)
        swapped = {"model": self.model_for(other), "harness": self.harness_for(other)}
        return resolve(base, self.categories).model_copy(update=swapped)

    def role_of(self, category: str) -> Role:
        return self.category(category).role

    def categories_in(self, role: Role) -> list[str]:
        """The names of the categories, built-in and the project's own, that have ``role``."""
        return sorted(name for name in {*DEFAULT_CATEGORIES, *self.categories} if self.role_of(name) is role)

    def harness_for(self, category: str) -> HarnessName:
        """The harness that runs agents of ``category``: its own, else the project's (planner and
        validator categories run on api whatever the project says; see :mod:`shared.harnesses`)."""
        if self.role_of(category) in _API_ONLY:
            return "api"
        return self.category(category).harness or self.harness

    def harnesses_in_use(self) -> set[HarnessName]:
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
        own default (codex: an OpenAI model), then the project's (a reviewer's: another than the
        builder's, :func:`shared.dialectic.counterpart`)."""
        harness = self.harness_for(category)
        table = self.harnesses.get(harness)
        if table is not None and table.model:
            return table.model
        default = HARNESSES[harness].default_model if harness in HARNESSES else None
        own = self.category(category).model or default
        if own is None and self.role_of(category) is Role.REVIEWER:  # by default not the builder's
            return counterpart(self.model_for("builder"))
        return own or self.model
