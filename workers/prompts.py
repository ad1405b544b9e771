"""What an iteration's fresh context is made of: the system prompt, PROMPT.md and the task.

The stable prefix (tools, system prompt, PROMPT.md) carries a ``cache_control`` breakpoint so
the later turns of an iteration read it from the prompt cache.
"""

from __future__ import annotations

from typing import Any

from workers.records import Claim

CACHE = {"type": "ephemeral"}

BUILDER_SYSTEM = """You are an autonomous coding agent running one iteration of a Ralph loop.
Your memory between iterations is the workspace itself (files, notes, git history): read it
first, make progress on the task, and leave notes for the next iteration.
Every tool runs inside a sandboxed container whose working directory is /workspace.
When the whole task is done and verified, call task_complete with a short summary.
If it is not done, end your turn; the next iteration continues from the workspace."""

TASK_COMPLETE_TOOL: dict[str, Any] = {
    "name": "task_complete",
    "description": (
        "Declare the whole task done. Call it only when the work is finished and verified; "
        "the iteration ends after this call."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"summary": {"type": "string", "description": "What was done, in a few lines."}},
        "required": ["summary"],
        "additionalProperties": False,
    },
}


def system_blocks(claim: Claim) -> list[dict[str, Any]]:
    return [
        {"type": "text", "text": BUILDER_SYSTEM},
        {"type": "text", "text": f"# PROMPT.md\n\n{claim.prompt}", "cache_control": CACHE},
    ]


def first_message(claim: Claim) -> dict[str, Any]:
    text = (
        f"Iteration {claim.number} of project {claim.project_name!r}.\n"
        f"Task: {claim.task_title}\n{claim.task_description}".rstrip()
        + "\nStart by looking at the workspace."
    )
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def with_cache_breakpoint(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tool list with a breakpoint on its last entry (tools come first in the cache prefix)."""
    if not tools:
        return tools
    return [*tools[:-1], {**tools[-1], "cache_control": CACHE}]
