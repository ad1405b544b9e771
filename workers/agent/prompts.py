"""What an iteration's fresh context is made of: the system prompt, PROMPT.md and the task.

The stable prefix (tools, system prompt, PROMPT.md) carries a ``cache_control`` breakpoint so
the later turns of an iteration read it from the prompt cache.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from shared.categories import Role
from shared.dag import Plan
from shared.said import quoted
from workers.claim import Claim
from workers.tools.base import ToolArgs, input_schema

CACHE = {"type": "ephemeral"}


class TaskCompleteArgs(ToolArgs):
    summary: str = Field(description="What was done, in a few lines.")


class SpawnSubagentArgs(ToolArgs):
    category: str = Field(description="The subagent's category.")
    prompt: str = Field(min_length=1, description="What the subagent must do and report.")


TASK_COMPLETE_TOOL: dict[str, Any] = {
    "name": "task_complete",
    "description": (
        "Declare the whole task done. Call it only when the work is finished and verified; "
        "the iteration ends after this call."
    ),
    "input_schema": input_schema(TaskCompleteArgs),
}


SPAWN_SUBAGENT_TOOL: dict[str, Any] = {
    "name": "spawn_subagent",
    "description": (
        "Ask for a subagent of a category (e.g. searcher, analyzer) to work on a prompt in its own "
        "sandbox. It starts when this iteration ends; parallel categories work on a copy of the "
        "workspace and return a report, which your next iteration receives. Spawn what you need, "
        "then end your turn."
    ),
    "input_schema": input_schema(SpawnSubagentArgs),
}

SUBMIT_PLAN_TOOL: dict[str, Any] = {
    "name": "submit_plan",
    "description": (
        "Submit the project's task graph. Each task has a unique id, a title, a description, a "
        "category (builder unless it needs another) and depends_on (ids of tasks that must finish "
        "first; no cycles). The plan is checked; an invalid one comes back with the reason."
    ),
    # The model that validates the plan (shared.dag.Plan) is the schema the planner is shown.
    "input_schema": input_schema(Plan),
}


# How a builder is given a reviewer's critique (the dialectic workflow, shared.dialectic).
REVIEW_INTRO = (
    "A reviewer (another agent, with fresh eyes and read-only tools) read what your last iteration "
    "changed, against the task. Answer its critique in this iteration: fix what it rightly finds, "
    "and where you disagree say why in your notes. The project's check, not the reviewer, decides "
    "when the task is done. The critique:\n"
)


def system_blocks(claim: Claim) -> list[dict[str, Any]]:
    template = claim.config.category(claim.category).prompt or "{task}"
    return [
        {"type": "text", "text": template.replace("{task}", claim.task_text)},
        {"type": "text", "text": f"# PROMPT.md\n\n{claim.prompt}", "cache_control": CACHE},
    ]


def first_message(claim: Claim) -> dict[str, Any]:
    parts = [
        f"Iteration {claim.number} of project {claim.project_name!r} "
        f"({claim.category} agent {claim.agent_id}).",
        f"Task: {claim.task_text}",
    ]
    if claim.feedback and claim.role is Role.REVIEWER:
        parts.append(f"The project's check failed on an earlier attempt at this task:\n{claim.feedback}")
    elif claim.feedback:
        parts.append(f"The validator ran the project's check and it failed; fix this:\n{claim.feedback}")
    for category, report in claim.reports:
        if claim.config.role_of(category) is Role.REVIEWER:
            parts.append(REVIEW_INTRO + report)
        else:
            parts.append(f"Report from your {category} subagent:\n{report}")
    for message in claim.mail:
        to_all = " to every agent" if message.broadcast else ""
        parts.append(
            f"Message from {message.sender_category} agent {message.sender_id}{to_all}:\n{message.text}"
        )
    if claim.round_feedback:
        parts.append(claim.round_feedback)
    if claim.said:
        parts.append(quoted(claim.said))
    parts.append("Start by looking at the workspace.")
    return {"role": "user", "content": [{"type": "text", "text": "\n\n".join(parts)}]}


def tools_for(claim: Claim, sandbox_specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The category's sandbox tools, then task_complete, spawn_subagent and (planner) submit_plan.

    A reviewer gets no spawn_subagent: it reads and reports, with what its category lists only.
    """
    # spawn_subagent is offered even past the depth limit, so a refusal says why.
    tools = [*sandbox_specs, TASK_COMPLETE_TOOL]
    if claim.role is not Role.REVIEWER:
        tools.append(SPAWN_SUBAGENT_TOOL)
    if claim.role is Role.PLANNER:
        tools.append(SUBMIT_PLAN_TOOL)
    return with_cache_breakpoint(tools)


def with_cache_breakpoint(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool list with a breakpoint on its last entry (tools come first in the cache prefix)."""
    if not tools:
        return tools
    return [*tools[:-1], {**tools[-1], "cache_control": CACHE}]
