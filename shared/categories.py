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

#: The sandbox tools an agent may be given (task_complete and spawn_subagent are added by the engine).
SANDBOX_TOOLS = ("bash", "read", "write", "edit", "glob", "grep")
READ_ONLY_TOOLS = ("read", "glob", "grep")
#: The tools answered from the database (the memory bank, messages between agents): every
#: category has them unless it says ``coordination = false``.
COORDINATION_TOOLS = ("memory_write", "memory_read", "memory_search", "send_message")


class Role(str, Enum):
    """What an agent does in a workflow."""

    BUILDER = "builder"  # loops on its task, changing the workspace, until it is done
    VALIDATOR = "validator"  # runs the project's check command instead of a model: gates a task
    PLANNER = "planner"  # writes the task graph of a planned project (submit_plan)
    RESEARCH = "research"  # reads and reports back (usually parallel, on a copy of the workspace)


class CategoryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    description: str = Field(default="", description="What agents of this category are for.")
    role: Role = Field(
        default=Role.BUILDER,
        description='"builder", "validator" (runs check_command, gates the task), "planner" (writes '
        'the task graph) or "research": what the engine does with the agent, whatever the name.',
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
        tools=[*READ_ONLY_TOOLS, "bash"],
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
        tools=["bash", *READ_ONLY_TOOLS],
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
}


def resolve(name: str, overrides: dict[str, CategoryConfig]) -> CategoryConfig:
    """A category as configured: the user's fields over the default's."""
    base = DEFAULT_CATEGORIES.get(name, CategoryConfig())
    if name not in overrides:
        return base
    given = overrides[name].model_dump(exclude_unset=True)
    return base.model_copy(update=given)
