"""Agent categories: what kind of agent works a task — its role, model, tools, whether it may run
in parallel with others, and its prompt. Defaults for searcher, analyzer, builder, validator and
planner; raas.toml ``[categories.NAME]`` overrides them or adds new ones.

What the engine does with an agent follows from its category's :class:`Role`, never from the
category's name: a user's category with ``role = "validator"`` gates a pipeline task as the
built-in validator does.

Only a non-parallel category changes the project's workspace. A parallel one works on a copy
and hands back a report.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

from shared.harnesses import HarnessName
from shared.tool_names import BASH, COORDINATION_TOOLS, READ_ONLY_TOOLS, SANDBOX_TOOLS


class Role(str, Enum):
    """What an agent does in a workflow."""

    BUILDER = "builder"  # loops on its task, changing the workspace, until it is done
    VALIDATOR = "validator"  # runs the project's check command instead of a model: gates a task
    PLANNER = "planner"  # writes the task graph of a planned project (submit_plan)
    RESEARCH = "research"  # reads and reports back (usually parallel, on a copy of the workspace)
    REVIEWER = "reviewer"  # criticises a builder's iteration (dialectic): read-only, fresh, on a copy


class CategoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = Field(default="", description="What agents of this category are for.")
    role: Role = Field(
        default=Role.BUILDER,
        description='"builder", "validator" (runs check_command, gates the task), "planner" (writes '
        'the task graph), "research" or "reviewer" (criticises a builder\'s iteration in the dialectic '
        "workflow): what the engine does with the agent, whatever the name.",
    )
    model: str | None = Field(default=None, description="Claude model; the project's model when unset.")
    tools: list[str] | None = Field(default=None, description=f"Tools from {', '.join(SANDBOX_TOOLS)}.")
    parallel: bool = Field(
        default=False, description="Runs beside others on a copy of the workspace and returns a report."
    )
    prompt: str | None = Field(default=None, description="System prompt template; {task} is the task text.")
    coordination: bool = Field(
        default=True,
        description=f"Gets the memory bank and message tools ({', '.join(COORDINATION_TOOLS)}).",
    )
    harness: HarnessName | None = Field(
        default=None,
        description='What runs its agents: "api", "claude-code", "codex" or "opencode"; unset: the '
        "project's harness (planner and validator categories always run on api).",
    )


_RALPH = """Your memory between iterations is the workspace itself (files, notes, git history):
read it first, make progress, and leave notes for the next iteration. Every tool runs inside a
sandboxed container whose working directory is /workspace."""

_REVIEW = """You are the reviewer of a builder agent's work: a second, independent opinion. You did not
write this code and you do not change it: your tools only read. The request below names the task and
the files the builder's last iteration changed; read them (and whatever else you need) in the
workspace, which holds that iteration's commit. Judge the change against the task and PROMPT.md:
what is wrong or missing, what would fail a test, what the builder claimed but did not do. Be
concrete (file, line, why) and brief; say so plainly if the change looks right. Then call
task_complete with the critique as its summary: the builder's next iteration receives it. The
project's check command, not you, decides whether the task is done."""

DEFAULT_CATEGORIES: dict[str, CategoryConfig] = {
    "searcher": CategoryConfig(
        description="Finds the files and facts a task needs.",
        role=Role.RESEARCH,
        tools=list(READ_ONLY_TOOLS),
        parallel=True,
        prompt="You are a searcher subagent. Find the code, files and facts relevant to:\n{task}\n"
        "Do not change anything. Call task_complete with a report: paths, what they hold, why they matter.",
    ),
    "analyzer": CategoryConfig(
        description="Works out how a task should be done.",
        role=Role.RESEARCH,
        tools=[*READ_ONLY_TOOLS, BASH],
        parallel=True,
        prompt="You are an analyzer subagent. Study the workspace and work out how to do:\n{task}\n"
        "Do not change files. Call task_complete with a report: the approach, the risks, the steps.",
    ),
    "builder": CategoryConfig(
        description="Changes the workspace to do the task (the Ralph loop).",
        tools=list(SANDBOX_TOOLS),
        prompt="You are an autonomous coding agent running one iteration of a Ralph loop.\n"
        + _RALPH
        + "\nTask:\n{task}\nWhen the whole task is done and verified, call task_complete with a short "
        "summary. If it is not done, end your turn; the next iteration continues from the workspace.",
    ),
    "validator": CategoryConfig(
        description="Runs the project's check command and gates completion.",
        role=Role.VALIDATOR,
        tools=[BASH, *READ_ONLY_TOOLS],
        prompt="You are a validator. Check that this task is really done:\n{task}\n"
        "Call task_complete only if it is.",
    ),
    "planner": CategoryConfig(
        description="Writes the task graph of a planned project.",
        role=Role.PLANNER,
        tools=list(READ_ONLY_TOOLS),
        prompt="You are the planner. Study the workspace and PROMPT.md, then call submit_plan with the "
        "objectives, the exit criteria and the tasks (ids, titles, descriptions, categories, depends_on). "
        "Tasks that depend on nothing run first, in parallel.\n{task}",
    ),
    "reviewer": CategoryConfig(
        description="Criticises a builder's iteration against its task (the dialectic workflow).",
        role=Role.REVIEWER,
        tools=list(READ_ONLY_TOOLS),
        parallel=True,
        coordination=False,
        prompt=_REVIEW,
    ),
}


def resolve(name: str, overrides: dict[str, CategoryConfig]) -> CategoryConfig:
    """A category as configured: the user's fields over the default's."""
    base = DEFAULT_CATEGORIES.get(name, CategoryConfig())
    if name not in overrides:
        return base
    given = overrides[name].model_dump(exclude_unset=True)
    return base.model_copy(update=given)
