"""One iteration's agent session: the tool-use loop, from its context to the end of the turn.

Every tool call runs in the iteration's sandbox, but ``task_complete``, ``spawn_subagent`` and
``submit_plan`` are answered here and the memory and message tools from the database
(:mod:`workers.tools.coordination`). What the
model sent is never trusted blindly: a tool call from a reply cut off at ``max_tokens`` is not
run (its input is truncated even when it parses), a tool input that is not JSON is refused,
a refusal or a reply without a stop reason is never taken for completion.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
from pydantic import ValidationError

from shared import budget
from shared.categories import DEFAULT_CATEGORIES, Role
from shared.dag import Plan, validate_dag
from shared.errors import CallExceedsRateLimit, InvalidInput
from shared.event_payloads import (
    AgentOutputChunk,
    AgentToolCall,
    BudgetWarning,
    LlmRetry,
    RateLimitWait,
    SubagentSpawned,
    ToolExecuted,
)
from shared.events import EventData
from shared.memory import ToolCall
from shared.models import ErrorKind
from shared.pricing import find_price
from shared.schemas import EventOut
from workers import records
from workers.agent import context, prompts
from workers.agent.output import OutputCoalescer
from workers.llm import client as llm
from workers.llm.ratelimit import Admission, ProjectLimits, RateLimiter
from workers.llm.retry import Failure, IncompleteReply, RetryPolicy, classify, retry_after_s
from workers.records import Claim
from workers.sandbox.base import Sandbox
from workers.tools import TOOL_NAMES, execute, tool_specs
from workers.tools.coordination import COORDINATION_TOOLS, Caller, answer

log = logging.getLogger(__name__)
PREVIEW_CHARS = 2000
REPORT_CHARS = 8000
MAX_TOKENS_CEILING = 64_000


Emit = Callable[[EventData], None]
Publish = Callable[[EventOut], None]


class SessionFailure(Exception):
    """The session cannot go on; ``kind`` tells the coordinator what to do about it.

    A control-flow signal between the session and the iteration runner, which records it as the
    iteration's end (its error and error kind); it never reaches a user as an exception.
    """

    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class SessionResult:
    completed: bool = False
    summary: str | None = None
    turns: int = 0


def _tool_result(tool_use_id: str, content: str, is_error: bool) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content, "is_error": is_error}


class AgentSession:
    def __init__(
        self,
        claim: Claim,
        sandbox: Sandbox,
        client: anthropic.Anthropic,
        emit: Emit,
        policy: RetryPolicy | None = None,
        limiter: RateLimiter | None = None,
        publish: Publish | None = None,
    ) -> None:
        self.claim = claim
        self.config = claim.config
        self.sandbox = sandbox
        self.client = client
        self.emit = emit
        # Events a tool recorded in its own transaction (a memory write, a message), to publish.
        self.publish = publish or (lambda event: None)
        self.policy = policy or RetryPolicy()
        self.limiter = limiter
        rate = claim.config.rate_limit
        self.project_limits = ProjectLimits(
            calls_per_hour=rate.calls_per_hour, tokens_per_hour=rate.tokens_per_hour
        )
        self.seq = 0
        self.max_tokens = self.config.max_tokens
        # Lowered when the model says the prompt is too long, so later turns fit at once.
        self.window_tokens = self.config.context_window_tokens
        category = self.config.category(claim.category)
        self.coordination = tuple(COORDINATION_TOOLS) if category.coordination else ()
        specs = tool_specs(category.tools or TOOL_NAMES)
        specs += [COORDINATION_TOOLS[name].spec() for name in self.coordination]
        self.tools = prompts.tools_for(claim, specs)
        self.output = OutputCoalescer(lambda text: self.emit(AgentOutputChunk(text=text)))

    def _reserve(self, window: list[dict[str, Any]]) -> None:
        """Reserve the next call's worst-case cost, or end the session: the budget is spent."""
        price = find_price(self.config.model_for(self.claim.category), self.config.pricing)
        assert price is not None  # raas.toml validation refuses unpriced models
        size = context.estimate_tokens(
            [*window, {"system": prompts.system_blocks(self.claim), "tools": self.tools}]
        )
        amount = budget.call_estimate_usd(price, size, self.max_tokens)
        if not records.reserve_call_waiting(self.claim, amount):
            raise SessionFailure(ErrorKind.BUDGET, records.BUDGET_SPENT)

    def _admit(self, window: list[dict[str, Any]]) -> Admission | None:
        """Wait for room under the cluster-wide rate limits; say so in an event while waiting."""
        if self.limiter is None:
            return None

        def waiting(wait_s: float, limit: str) -> None:
            self.emit(RateLimitWait(wait_s=round(wait_s, 2), limit=limit))

        size = context.estimate_tokens([*window, {"system": prompts.system_blocks(self.claim)}])
        try:
            return self.limiter.acquire(
                self.claim.project_id, self.project_limits, size, self.max_tokens, on_wait=waiting
            )
        except CallExceedsRateLimit as exc:
            raise SessionFailure(ErrorKind.LLM, str(exc)) from exc

    def _store(self, role: str, content: list[dict[str, Any]], reply: llm.Reply | None = None) -> None:
        settlement = records.store_message(
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
        if settlement is not None and settlement.warn:
            self.emit(BudgetWarning(spent_usd=settlement.spent_usd, limit_usd=settlement.limit_usd))

    def _opening(self) -> list[dict[str, Any]]:
        opening = prompts.first_message(self.claim)
        self._store("user", opening["content"])
        if self.config.context == "continue":
            return [*context.history(self.claim.agent_id, self.claim.number), opening]
        return [opening]

    def run(self) -> SessionResult:
        messages = self._opening()
        result = SessionResult()
        while result.turns < self.config.max_turns:
            if not records.project_running(self.claim.project_id):
                return result  # paused or stopped: end after the call that was running
            result.turns += 1
            reply = self._call(messages)
            if reply.stop_reason == "refusal":
                category = (reply.stop_details or {}).get("category", "unspecified")
                msg = f"the model refused (category: {category})"
                raise SessionFailure(ErrorKind.REFUSAL, msg)
            if reply.stop_reason == "max_tokens":
                messages = self._after_cut_off(messages, reply)
                continue
            messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason != "tool_use" or not reply.tool_uses():
                self._check_marker(reply, result)
                if not result.completed:
                    result.summary = reply.text()[-REPORT_CHARS:] or None  # a subagent's report
                return result
            results = [self._run_tool(block, reply, result) for block in reply.tool_uses()]
            messages.append({"role": "user", "content": results})
            self._store("user", results)
            if result.completed:
                return result
        log.info("iteration %s reached its turn cap of %d", self.claim.iteration_id, self.config.max_turns)
        return result

    def _check_marker(self, reply: llm.Reply, result: SessionResult) -> None:
        marker = self.config.completion_marker
        if marker and marker in reply.text():
            result.completed, result.summary = True, reply.text()[-500:]

    def _after_cut_off(self, messages: list[dict[str, Any]], reply: llm.Reply) -> list[dict[str, Any]]:
        """A reply cut off at max_tokens: never run its tool calls; retry with room, or continue text."""
        if reply.tool_uses():
            if self.max_tokens >= MAX_TOKENS_CEILING:
                msg = "reply cut off at max_tokens even with the largest limit"
                raise SessionFailure(ErrorKind.MAX_TOKENS, msg)
            self.max_tokens = min(MAX_TOKENS_CEILING, self.max_tokens * 2)
            discarded = len(reply.tool_uses())
            self.emit(
                LlmRetry(reason="max_tokens", tool_calls_discarded=discarded, max_tokens=self.max_tokens)
            )
            return messages
        note = {"type": "text", "text": "Your reply was cut off at max_tokens; continue where it stopped."}
        self._store("user", [note])
        return [
            *messages,
            {"role": "assistant", "content": reply.content},
            {"role": "user", "content": [note]},
        ]

    def _call(self, messages: list[dict[str, Any]]) -> llm.Reply:
        """One LLM call, retried and classified (DESIGN.md rule 6); every answer is stored.

        Each attempt first reserves its worst-case cost (DESIGN.md rule 1); storing the answer
        settles the reservation, a failed attempt releases it.
        """
        waited = 0.0
        for attempt in range(self.policy.max_attempts):
            window = context.truncate(messages, self.window_tokens)
            self._reserve(window)
            admission = self._admit(window)
            try:
                reply = llm.call(
                    self.client,
                    model=self.config.model,
                    max_tokens=self.max_tokens,
                    system=prompts.system_blocks(self.claim),
                    tools=self.tools,
                    messages=window,
                    session_key=self.claim.project_id,
                    on_text=self.output.add,
                )
            except Exception as exc:
                records.release(self.claim)
                if admission is not None:
                    admission.adjust(0, 0)
                failure: Exception = exc
            else:
                if admission is not None:
                    usage = reply.usage
                    admission.adjust(
                        usage.input_tokens + usage.cache_creation_input_tokens, usage.output_tokens
                    )
                self.output.flush()
                self._store("assistant", reply.content, reply)
                if reply.stop_reason is not None:
                    return reply
                failure = IncompleteReply("the stream ended without a stop reason")
            self.output.flush()
            kind = classify(failure)
            messages = self._handle_failure(failure, kind, window)
            delay = self.policy.delay_s(attempt, retry_after_s(failure)) if kind is Failure.RETRY else 0.0
            waited += delay
            if waited > self.policy.max_total_wait_s:
                break
            self.emit(
                LlmRetry(
                    reason=kind.value, error=_describe(failure), attempt=attempt + 1, delay_s=round(delay, 2)
                )
            )
            time.sleep(delay)
        msg = f"LLM call failed after {self.policy.max_attempts} attempts"
        raise SessionFailure(ErrorKind.LLM, msg)

    def _handle_failure(
        self, exc: Exception, kind: Failure, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Raise if the call cannot be retried; else what to send next (``messages``: as sent)."""
        if kind is Failure.API_KEY:
            msg = f"the API key was rejected: {_describe(exc)}"
            raise SessionFailure(ErrorKind.API_KEY, msg) from exc
        if kind is Failure.CONTEXT_TOO_LONG:
            shorter = context.truncate(messages, context.estimate_tokens(messages) // 2)
            if context.estimate_tokens(shorter) >= context.estimate_tokens(messages):
                msg = "the prompt is too long even after truncation"
                raise SessionFailure(ErrorKind.CONTEXT_TOO_LONG, msg) from exc
            self.window_tokens = min(self.window_tokens, context.estimate_tokens(shorter))
            return shorter
        if kind is Failure.FATAL:
            msg = f"LLM call failed: {_describe(exc)}"
            raise SessionFailure(ErrorKind.LLM, msg) from exc
        return messages

    def _run_tool(self, block: dict[str, Any], reply: llm.Reply, result: SessionResult) -> dict[str, Any]:
        name, args, use_id = block["name"], block.get("input"), block["id"]
        self.emit(AgentToolCall(tool=name, input=args, tool_use_id=use_id))
        if use_id in reply.invalid_tool_inputs:
            raw = reply.invalid_tool_inputs[use_id][:200]
            content, is_error = (
                f"Not run: the tool input was not valid JSON ({raw!r}). Send the call again.",
                True,
            )
        elif name == "spawn_subagent":
            content, is_error = self._spawn(args)
        elif name == "submit_plan" and self.claim.role is Role.PLANNER:
            content, is_error = self._plan(args, result)
        elif name in self.coordination:
            content, is_error = self._coordinate(name, args, use_id)
        elif name == "task_complete":
            summary = args.get("summary") if isinstance(args, dict) else None
            result.completed, result.summary = True, str(summary or "")
            content, is_error = "Task marked complete.", False
        else:
            outcome = execute(self.sandbox, name, args, denylist=self.config.denylist)
            content, is_error = outcome.content, outcome.is_error
        self.emit(
            ToolExecuted(tool=name, tool_use_id=use_id, is_error=is_error, output=content[:PREVIEW_CHARS])
        )
        return _tool_result(use_id, content, is_error)

    def _coordinate(self, name: str, args: Any, use_id: str) -> tuple[str, bool]:
        claim = self.claim
        call = ToolCall(claim.project_id, claim.agent_id, claim.iteration_id, use_id)
        outcome = answer(Caller(call, claim.memory_bank, self.config.memory), name, args)
        if outcome.event is not None:
            self.publish(outcome.event)
        return outcome.result.content, outcome.result.is_error

    def _spawn(self, args: Any) -> tuple[str, bool]:
        try:
            spawn = prompts.SpawnSubagentArgs.model_validate(args)
        except ValidationError:
            return "spawn_subagent needs a category and a prompt (both strings).", True
        category, limit = spawn.category, self.config.max_subagent_depth
        if self.claim.depth + 1 > limit:
            return f"Refused: subagents may not be deeper than {limit} (raas.toml max_subagent_depth).", True
        known = {*DEFAULT_CATEGORIES, *self.config.categories}
        if category not in known:
            return f"Refused: unknown category {category!r}; known: {', '.join(sorted(known))}.", True
        parallel = self.config.category(category).parallel
        agent_id = records.spawn(self.claim, category, spawn.prompt, parallel)
        self.emit(SubagentSpawned(agent_id=agent_id, category=category, parallel=parallel))
        return (
            f"Subagent {agent_id} ({category}) starts when this iteration ends; its report comes to your "
            "next iteration. End your turn once you have spawned what you need.",
            False,
        )

    def _plan(self, args: Any, result: SessionResult) -> tuple[str, bool]:
        try:
            plan = Plan.model_validate(args)
            validate_dag(plan.tasks)
        except (ValidationError, InvalidInput) as exc:
            return f"Plan refused: {' '.join(str(exc).split())[:500]}. Fix it and submit again.", True
        known = {*DEFAULT_CATEGORIES, *self.config.categories}
        unknown = sorted({t.category for t in plan.tasks} - known)
        if unknown:
            return (
                f"Plan refused: unknown categories {', '.join(unknown)}; known: {', '.join(sorted(known))}.",
                True,
            )
        result.completed, result.summary = True, plan.model_dump_json()
        return f"Plan accepted: {len(plan.tasks)} tasks.", False


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"
