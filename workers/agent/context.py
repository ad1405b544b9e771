"""What goes into an iteration's messages, and how it is cut to fit the model's window.

Fresh context is the default (the Ralph principle): each iteration starts from PROMPT.md, its
task and the workspace. With ``context = "continue"`` the agent's earlier conversation is
carried over, oldest exchanges dropped first until it fits; within one exchange the oldest
tool results are emptied (the tool_use they answer stays, so the pairs remain valid).
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import select

from shared.db import session_scope
from shared.models import Iteration, IterationStatus, Message
from workers.llm.tokens import estimate_tokens

ANSWERED_STOPS = ("end_turn", "tool_use", "stop_sequence", "pause_turn")
ELIDED = "[output dropped to fit the context window; run the tool again if you need it]"


def _starts_exchange(message: dict[str, Any]) -> bool:
    """A user message that is not a tool result: cutting before it keeps tool pairs intact."""
    if message["role"] != "user":
        return False
    content = message["content"]
    if isinstance(content, str):
        return True
    return not any(block.get("type") == "tool_result" for block in content)


def truncate(messages: list[dict[str, Any]], budget_tokens: int) -> list[dict[str, Any]]:
    """Cut the messages until the estimate fits: drop the oldest whole exchanges, then (a fresh
    iteration is one exchange) empty the oldest tool results. The last message stays whole."""
    starts = [i for i, m in enumerate(messages) if _starts_exchange(m)]
    kept = messages
    for start in starts[1:]:
        if estimate_tokens(kept) <= budget_tokens:
            break
        kept = messages[start:]
    return _elide_tool_results(kept, budget_tokens)


def _elide_tool_results(messages: list[dict[str, Any]], budget_tokens: int) -> list[dict[str, Any]]:
    """Replace the content of the oldest tool results by a note; their tool_use pairs stay."""
    kept = list(messages)
    for index, message in enumerate(kept[:-1]):
        if estimate_tokens(kept) <= budget_tokens:
            break
        if message["role"] == "user" and isinstance(message["content"], list):
            kept[index] = {**message, "content": [_elided(block) for block in message["content"]]}
    return kept


def _elided(block: dict[str, Any]) -> dict[str, Any]:
    if block.get("type") != "tool_result" or len(json.dumps(block.get("content"))) <= len(ELIDED):
        return block
    return {**block, "content": ELIDED}


def history(agent_id: str, before_number: int) -> list[dict[str, Any]]:
    """The agent's conversation in its earlier finished iterations (their final attempts)."""
    with session_scope() as session:
        rows = session.execute(
            select(Message.role, Message.content)
            .join(Iteration, Iteration.id == Message.iteration_id)
            .where(
                Message.agent_id == agent_id,
                Iteration.number < before_number,
                Iteration.status == IterationStatus.SUCCEEDED,
                Message.attempt == Iteration.attempt,
                # Replies that were cut off, refused or incomplete were never answered.
                (Message.role == "user") | Message.stop_reason.in_(ANSWERED_STOPS),
            )
            .order_by(Iteration.number, Message.seq)
        ).all()
    merged: list[dict[str, Any]] = []
    for role, content in rows:
        # Two user messages in a row (an iteration's last tool results, the next one's opening)
        # are merged: the API wants roles to alternate.
        if merged and merged[-1]["role"] == role == "user":
            merged[-1] = {"role": "user", "content": [*merged[-1]["content"], *content]}
        else:
            merged.append({"role": role, "content": list(content)})
    return merged
