"""What a person said to the agent while its iteration runs, heard at the next turn boundary.

The built-in loop asks before each model call after its first (the first message already holds
what the claim took): new messages become one text block appended to the user turn that goes
out next, so the roles still alternate and the model reads them before it answers.

``raas say --now`` ends the current turn after the tool call in flight: between the tool calls of
one reply the loop asks :func:`run_tools`, which runs no further call once a ``--now`` message
waits (each left out gets a result saying so, as the API requires one per call); the message goes
in before the next model call, as any other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from shared import said
from shared.db import session_scope
from workers.claim import Claim


def new_block(claim: Claim, seen: set[str]) -> dict[str, Any] | None:
    """A text block of what was said since ``seen`` (updated), or None when nothing was."""
    with session_scope() as session:
        heard = [
            h
            for h in said.take(session, claim.project_id, claim.agent_id, claim.iteration_id)
            if h.id not in seen
        ]
    if not heard:
        return None
    seen.update(h.id for h in heard)
    return {"type": "text", "text": said.quoted(heard)}


def with_block(messages: list[dict[str, Any]], block: dict[str, Any]) -> list[dict[str, Any]]:
    """``messages`` with ``block`` at the end of the last user turn (or in a new one)."""
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "user":
        content = last["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
        return [*messages[:-1], {"role": "user", "content": [*blocks, block]}]
    return [*messages, {"role": "user", "content": [block]}]


NOT_RUN = "Not run: a person interrupted your turn (raas say --now); read what they said, then decide again."


def run_tools(
    claim: Claim, uses: Sequence[dict[str, Any]], run: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[dict[str, Any]]:
    """The results of a reply's tool calls, run in order with ``run`` until a person interrupts."""
    results: list[dict[str, Any]] = []
    for index, block in enumerate(uses):
        if index and _interrupted(claim):
            skipped = uses[index:]
            return results + [
                {"type": "tool_result", "tool_use_id": b["id"], "content": NOT_RUN, "is_error": True}
                for b in skipped
            ]
        results.append(run(block))
    return results


def _interrupted(claim: Claim) -> bool:
    with session_scope() as session:
        return said.interrupts(session, claim.project_id, claim.agent_id)
