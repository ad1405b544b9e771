"""The built-in loop (the ``api`` harness): one iteration's agent session, the tool-use loop,
from its context to the end of the turn; :mod:`workers.runners.api` runs it in its sandbox.

Every tool call runs in the iteration's sandbox, but ``task_complete``, ``spawn_subagent`` and
``submit_plan`` are answered here and the memory and message tools from the database
(:mod:`workers.tools.coordination`). What the
model sent is never trusted blindly: a tool call from a reply cut off at ``max_tokens`` is not
run (its input is truncated even when it parses), a tool input that is not JSON is refused,
a refusal or a reply without a stop reason is never taken for completion.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from typing import Any

import anthropic
from pydantic import ValidationError

from shared.categories import DEFAULT_CATEGORIES, Role
from shared.dag import Plan, validate_dag
from shared.errors import BudgetExceeded, CallExceedsRateLimit, InvalidInput, ProjectNotRunning
from shared.event_payloads import (
    AgentOutputChunk,
    AgentToolCall,
    BudgetWarning,
    LlmRetry,
    RateLimitWait,
    SubagentSpawned,
    ToolExecuted,
)
from shared.memory import ToolCall
from shared.models import ErrorKind
from workers.agent import context, heard, prompts
from workers.agent.output import OutputCoalescer
from workers.agent.subagents import record_subagent
from workers.claim import Claim
from workers.ledger import CallLedger, Ticket
from workers.llm import client as llm
from workers.llm.ratelimit import Admission, ProjectLimits, RateLimiter
from workers.llm.retry import Failure, IncompleteReply, RetryPolicy, cause, classify
from workers.runners.base import Emit, Publish, RunFailure, RunResult
from workers.sandbox.base import Sandbox
from workers.tools import TOOL_NAMES, execute, tool_specs
from workers.tools.coordination import COORDINATION_TOOLS, Caller, answer

log = logging.getLogger(__name__)
PREVIEW_CHARS = 2000
REPORT_CHARS = 8000
MAX_TOKENS_CEILING = 64_000


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
        self.ledger = CallLedger(claim)
        self.model = self.config.model_for(claim.category)
        self.max_tokens = self.config.max_tokens
        # Lowered when the model says the prompt is too long, so later turns fit at once.
        self.window_tokens = self.config.context_window_tokens
        category = self.config.category(claim.category)
        self.coordination = tuple(COORDINATION_TOOLS) if category.coordination else ()
        specs = tool_specs(category.tools or TOOL_NAMES)
        specs += [COORDINATION_TOOLS[name].spec() for name in self.coordination]
        self.tools = prompts.tools_for(claim, specs)
        self.output = OutputCoalescer(lambda text: self.emit(AgentOutputChunk(text=text)))
        # What people said that this iteration has read (its first message holds the claim's).
        self.heard = {message.id for message in claim.said}

    def _admit_call(self, window: list[dict[str, Any]]) -> Ticket:
        """The ledger's admission of the next call (its output limit perhaps lowered to what the
        budget pays), or the end of the session: the budget is spent."""
        request = {"system": prompts.system_blocks(self.claim), "tools": self.tools, "messages": window}
        size = len(json.dumps(request, ensure_ascii=False).encode())
        try:
            return self.ledger.admit(self.model, size, self.max_tokens, count=lambda: self._count(request))
        except BudgetExceeded as exc:
            raise RunFailure(ErrorKind.BUDGET, str(exc)) from exc

    def _count(self, request: dict[str, Any]) -> int | None:
        """The provider's count of the request's input tokens (free), or None if it gives none."""
        try:
            project = self.claim.project_id
            return llm.count_tokens(self.client, model=self.model, session_key=project, **request)
        except Exception:
            log.info("iteration %s: the model's token count failed", self.claim.iteration_id, exc_info=True)
            return None

    def _admit(self, window: list[dict[str, Any]], max_output_tokens: int) -> Admission | None:
        """Wait for room under the cluster-wide rate limits; say so in an event while waiting."""
        if self.limiter is None:
            return None

        def waiting(wait_s: float, limit: str) -> None:
            self.emit(RateLimitWait(wait_s=round(wait_s, 2), limit=limit))

        size = context.estimate_tokens([*window, {"system": prompts.system_blocks(self.claim)}])
        try:
            return self.limiter.acquire(
                self.claim.project_id, self.project_limits, size, max_output_tokens, on_wait=waiting
            )
        except CallExceedsRateLimit as exc:
            raise RunFailure(ErrorKind.LLM, str(exc)) from exc

    def _settle(self, ticket: Ticket, reply: llm.Reply) -> None:
        settlement = self.ledger.settle(
            ticket,
            reply.content,
            reply.usage,
            model=reply.model,
            stop_reason=reply.stop_reason,
            duration_s=reply.duration_s,
        )
        if settlement is not None and settlement.warn:
            self.emit(BudgetWarning(spent_usd=settlement.spent_usd, limit_usd=settlement.limit_usd))

    def _opening(self) -> list[dict[str, Any]]:
        opening = prompts.first_message(self.claim)
        self.ledger.record("user", opening["content"])
        if self.config.context == "continue":
            return [*context.history(self.claim.agent_id, self.claim.number), opening]
        return [opening]

    def run(self) -> RunResult:
        messages = self._opening()
        result = RunResult()
        while result.turns < self.config.max_turns:
            if result.turns and (said := heard.new_block(self.claim, self.heard)) is not None:
                self.ledger.record("user", [said])  # kept in the transcript, as from the user
                messages = heard.with_block(messages, said)
            try:
                reply = self._call(messages)
            except ProjectNotRunning:
                return result  # paused or stopped: end after the call that was running
            result.turns += 1
            if reply.stop_reason == "refusal":
                category = (reply.stop_details or {}).get("category", "unspecified")
                msg = f"the model refused (category: {category})"
                raise RunFailure(ErrorKind.REFUSAL, msg)
            if reply.stop_reason == "max_tokens":
                messages = self._after_cut_off(messages, reply)
                continue
            messages.append({"role": "assistant", "content": reply.content})
            if reply.stop_reason != "tool_use" or not reply.tool_uses():
                self._check_marker(reply, result)
                if not result.completed:
                    result.summary = reply.text()[-REPORT_CHARS:] or None  # a subagent's report
                return result
            run = functools.partial(self._run_tool, reply=reply, result=result)
            results = heard.run_tools(self.claim, reply.tool_uses(), run)  # until `raas say --now`
            messages.append({"role": "user", "content": results})
            self.ledger.record("user", results)
            if result.completed:
                return result
        log.info("iteration %s reached its turn cap of %d", self.claim.iteration_id, self.config.max_turns)
        return result

    def _check_marker(self, reply: llm.Reply, result: RunResult) -> None:
        marker = self.config.completion_marker
        if marker and marker in reply.text():
            result.completed, result.summary = True, reply.text()[-500:]

    def _after_cut_off(self, messages: list[dict[str, Any]], reply: llm.Reply) -> list[dict[str, Any]]:
        """A reply cut off at max_tokens: never run its tool calls; retry with room, or continue text."""
        if reply.tool_uses():
            if self.max_tokens >= MAX_TOKENS_CEILING:
                msg = "reply cut off at max_tokens even with the largest limit"
                raise RunFailure(ErrorKind.MAX_TOKENS, msg)
            self.max_tokens = min(MAX_TOKENS_CEILING, self.max_tokens * 2)
            discarded = len(reply.tool_uses())
            self.emit(
                LlmRetry(reason="max_tokens", tool_calls_discarded=discarded, max_tokens=self.max_tokens)
            )
            return messages
        note = {"type": "text", "text": "Your reply was cut off at max_tokens; continue where it stopped."}
        self.ledger.record("user", [note])
        return [
            *messages,
            {"role": "assistant", "content": reply.content},
            {"role": "user", "content": [note]},
        ]

    def _call(self, messages: list[dict[str, Any]]) -> llm.Reply:
        """One LLM call, retried and classified (DESIGN.md rule 6); every answer is stored.

        Each attempt is first admitted by the ledger (DESIGN.md rule 1), which reserves its worst
        case; the answer settles the reservation, a failed attempt releases it.
        """
        failed_at: float | None = None  # the first failure: the retry budget counts from it
        for attempt in range(1, self.policy.max_attempts + 1):
            window = context.truncate(messages, self.window_tokens)
            ticket = self._admit_call(window)
            admission = self._admit(window, ticket.max_output_tokens)
            try:
                reply = llm.call(
                    self.client,
                    model=self.model,
                    max_tokens=ticket.max_output_tokens,
                    system=prompts.system_blocks(self.claim),
                    tools=self.tools,
                    messages=window,
                    session_key=self.claim.project_id,
                    on_text=self.output.add,
                )
            except Exception as exc:
                self.ledger.release(ticket)
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
                self._settle(ticket, reply)
                if reply.stop_reason is not None:
                    return reply
                failure = IncompleteReply("the stream ended without a stop reason")
            self.output.flush()
            kind = classify(failure)
            messages = self._handle_failure(failure, kind, window)
            failed_at = failed_at if failed_at is not None else time.monotonic()
            retrying_for_s = time.monotonic() - failed_at
            delay = self.policy.wait_s(attempt, failure, retrying_for_s)
            if delay is None:
                break
            self.emit(
                LlmRetry(
                    reason=cause(failure).value,
                    error=_describe(failure),
                    attempt=attempt,
                    delay_s=round(delay, 2),
                )
            )
            time.sleep(delay)
        msg = f"{self.policy.gave_up(attempt, retrying_for_s, failure)}; the last error: {_describe(failure)}"
        raise RunFailure(ErrorKind.LLM, msg)

    def _handle_failure(
        self, exc: Exception, kind: Failure, messages: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Raise if the call cannot be retried; else what to send next (``messages``: as sent)."""
        if kind is Failure.API_KEY:
            msg = f"the API key was rejected: {_describe(exc)}"
            raise RunFailure(ErrorKind.API_KEY, msg) from exc
        if kind is Failure.CONTEXT_TOO_LONG:
            shorter = context.truncate(messages, context.estimate_tokens(messages) // 2)
            if context.estimate_tokens(shorter) >= context.estimate_tokens(messages):
                msg = "the prompt is too long even after truncation"
                raise RunFailure(ErrorKind.CONTEXT_TOO_LONG, msg) from exc
            self.window_tokens = min(self.window_tokens, context.estimate_tokens(shorter))
            return shorter
        if kind is Failure.FATAL:
            msg = f"LLM call failed: {_describe(exc)}"
            raise RunFailure(ErrorKind.LLM, msg) from exc
        return messages

    def _run_tool(self, block: dict[str, Any], reply: llm.Reply, result: RunResult) -> dict[str, Any]:
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
        agent_id = record_subagent(self.claim, category, spawn.prompt, parallel)
        self.emit(SubagentSpawned(agent_id=agent_id, category=category, parallel=parallel))
        return (
            f"Subagent {agent_id} ({category}) starts when this iteration ends; its report comes to your "
            "next iteration. End your turn once you have spawned what you need.",
            False,
        )

    def _plan(self, args: Any, result: RunResult) -> tuple[str, bool]:
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
