"""One iteration's agent session: the tool-use loop, from a fresh context to the end of the turn.

Every tool call runs in the iteration's sandbox; ``task_complete`` is answered here, not there.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import anthropic

from shared import events
from workers import llm, prompts, records
from workers.output import OutputCoalescer
from workers.records import Claim
from workers.sandbox.base import Sandbox
from workers.tools import TOOL_NAMES, execute, tool_specs

log = logging.getLogger(__name__)
PREVIEW_CHARS = 2000


class Emit(Protocol):
    def __call__(self, type_: str, data: dict[str, Any]) -> None: ...


@dataclass
class SessionResult:
    completed: bool = False
    summary: str | None = None
    turns: int = 0
    error: str | None = None


def _tool_result(tool_use_id: str, content: str, is_error: bool) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


class AgentSession:
    def __init__(self, claim: Claim, sandbox: Sandbox, client: anthropic.Anthropic, emit: Emit) -> None:
        self.claim = claim
        self.sandbox = sandbox
        self.client = client
        self.emit = emit
        self.seq = records.next_message_seq(claim.iteration_id)
        self.tools = prompts.with_cache_breakpoint([*tool_specs(TOOL_NAMES), prompts.TASK_COMPLETE_TOOL])

    def _store(self, role: str, content: list[dict[str, Any]], reply: llm.Reply | None = None) -> None:
        records.store_message(
            self.claim,
            self.seq,
            role,
            content,
            model=reply.model if reply else None,
            usage=reply.usage if reply else None,
            stop_reason=reply.stop_reason if reply else None,
            duration_s=reply.duration_s if reply else None,
        )
        self.seq += 1

    def run(self) -> SessionResult:
        config = self.claim.config
        messages = [prompts.first_message(self.claim)]
        self._store("user", messages[0]["content"])
        result = SessionResult()
        output = OutputCoalescer(lambda text: self.emit(events.AGENT_OUTPUT_CHUNK, {"text": text}))
        for _turn in range(config.max_turns):
            result.turns += 1
            reply = llm.call(
                self.client,
                model=config.model,
                max_tokens=config.max_tokens,
                system=prompts.system_blocks(self.claim),
                tools=self.tools,
                messages=messages,
                session_key=self.claim.project_id,
                on_text=output.add,
            )
            output.flush()
            self._store("assistant", reply.content, reply)
            messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason != "tool_use" or not reply.tool_uses():
                return result
            results = [self._run_tool(block, result) for block in reply.tool_uses()]
            messages.append({"role": "user", "content": results})
            self._store("user", results)
            if result.completed:
                return result
        log.info("iteration %s reached its turn cap of %d", self.claim.iteration_id, config.max_turns)
        return result

    def _run_tool(self, block: dict[str, Any], result: SessionResult) -> dict[str, Any]:
        name, args, use_id = block["name"], block.get("input"), block["id"]
        self.emit(events.AGENT_TOOL_CALL, {"tool": name, "input": args, "tool_use_id": use_id})
        if name == "task_complete":
            summary = args.get("summary") if isinstance(args, dict) else None
            result.completed, result.summary = True, str(summary or "")
            content, is_error = "Task marked complete.", False
        else:
            outcome = execute(self.sandbox, name, args, denylist=self.claim.config.denylist)
            content, is_error = outcome.content, outcome.is_error
        self.emit(
            events.TOOL_EXECUTED,
            {"tool": name, "tool_use_id": use_id, "is_error": is_error, "output": content[:PREVIEW_CHARS]},
        )
        return _tool_result(use_id, content, is_error)
