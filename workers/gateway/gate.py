"""The gate each harness model call passes: the ledger admits it
(:class:`workers.ledger.CallLedger`, the same as the built-in loop's: its worst case reserved,
its output limit lowered to what the budget pays), the rate limits admit it
(:class:`workers.llm.ratelimit.RateLimiter`), and its answer is recorded and charged once
through the same ledger — or, when it failed, its reservation is released and nothing is
charged.

The record and settlement run after the answer's last byte (:mod:`workers.gateway.recorder`),
and the lease's next call may be admitted meanwhile; the ledger runs those writes first
(``drain``) before it would lower or refuse a call, and the turn cap waits for them too.

``admit`` blocks (database, Redis, waiting for room): the server runs it off its event loop;
``settle`` and ``fail`` only hand their writes on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any

from shared.errors import (
    BudgetExceeded,
    CallExceedsRateLimit,
    InvalidInput,
    ProjectNotRunning,
    RateLimitWaitTooLong,
)
from shared.event_payloads import BudgetWarning, RateLimitWait
from shared.events import EventData
from shared.usage import Usage
from workers import ledger
from workers.claim import Claim
from workers.gateway.metering import Api, Meter
from workers.gateway.recorder import Recorder
from workers.llm.ratelimit import Admission, ProjectLimits, RateLimiter
from workers.llm.tokens import estimate_tokens

log = logging.getLogger(__name__)

Emit = Callable[[EventData], None]


@dataclass(frozen=True)
class GatewayStats:
    """What a lease's calls came to, for the harness runner to judge the iteration by."""

    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: Decimal = Decimal(0)
    budget_exhausted: bool = False  # a call was refused: the project's budget is spent
    auth_failed: bool = False  # the provider refused the worker's key (401/403)
    project_stopped: bool = False  # a call was refused: the project no longer runs
    max_turns_reached: bool = False  # a call was refused: the iteration's turn cap is reached
    last_error: str | None = None
    refused: int = 0  # calls answered by the gateway itself, never sent upstream
    token_counts: int = 0  # count_tokens calls answered upstream (free, but rate limited)


class Refused(Exception):
    """A call the gate will not send: answered to the harness as a non-retryable error.

    A control-flow signal between the gate and the server, not a failure of the gateway.
    """

    def __init__(self, status: int, error_type: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type


@dataclass
class Ticket:
    """One admitted call: its ledger ticket, its rate-limit admission and what it sent."""

    api: Api
    call: ledger.Ticket
    request: list[Any]
    admission: Admission | None
    ended: bool = False  # settled or failed: the first of the two counts, once

    @property
    def max_output_tokens(self) -> int:
        """What the call may ask for: lower than it asked when the budget pays no more."""
        return self.call.max_output_tokens


class Gate:
    """The budget, rate limits and ledger of one lease's calls (one iteration attempt)."""

    def __init__(
        self,
        claim: Claim,
        emit: Emit,
        limiter: RateLimiter | None,
        max_tokens: int,
        max_turns: int | None = None,
        *,
        pool: Executor,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.claim = claim
        self.emit = emit
        self.limiter = limiter
        self.default_max_tokens = max_tokens
        # Answered calls at most (None: no cap): the one turn cap every CLI passes, Codex having
        # none of its own and OpenCode only a soft one; Claude Code's --max-turns comes first.
        self.max_turns = max_turns
        self._turns = 0
        rate = claim.config.rate_limit
        self.project_limits = ProjectLimits(
            calls_per_hour=rate.calls_per_hour, tokens_per_hour=rate.tokens_per_hour
        )
        self._stats = GatewayStats()
        self._lock = threading.Lock()
        # What an answered call writes to the ledger, written after its answer (in ``pool``).
        self._recorder = Recorder(pool, loop, self._unrecorded)
        self.ledger = ledger.CallLedger(claim, drain=self._recorder.wait)
        # The tool calls of the last answer, (name, arguments, id), and the ids an MCP call took.
        self._tool_calls: list[tuple[str, Any, str]] = []
        self._taken: set[str] = set()

    def stats(self) -> GatewayStats:
        """What the lease's calls came to, once every answered call is recorded (not on the
        gateway's event loop: it may wait for the database)."""
        self.wait_written()
        with self._lock:
            return self._stats

    def _unrecorded(self, exc: Exception) -> None:
        self.note(last_error=f"a call could not be recorded: {exc}")

    def note(self, **changes: Any) -> None:
        with self._lock:
            self._stats = replace(self._stats, **changes)

    def admit(
        self, api: Api, body: dict[str, Any], request_bytes: int, count: ledger.Count | None = None
    ) -> Ticket:
        """Admit the call through the ledger and wait for room under the rate limits.

        ``request_bytes``: the request body's size (its input's bound); ``count``: the provider's
        count of its input, asked only near the budget's end.

        Raises:
            Refused: the project does not run, the model has no price, the budget is spent, or
                the call alone is larger than a rate limit.
        """
        try:
            return self._admit_call(api, body, request_bytes, count)
        except Refused as refused:
            with self._lock:
                self._stats = replace(self._stats, refused=self._stats.refused + 1)
            log.info("iteration %s: a %s call refused: %s", self.claim.iteration_id, api.value, refused)
            raise

    def _admit_call(
        self, api: Api, body: dict[str, Any], request_bytes: int, count: ledger.Count | None
    ) -> Ticket:
        capped = self._capped()
        if capped and self._recorder.busy():
            # An answer not yet read counts as a turn until read: it may turn out to be none.
            self._recorder.wait()
            capped = self._capped()
        if capped:
            self.note(max_turns_reached=True, last_error=f"the turn cap ({self.max_turns}) is reached")
            # The iteration ends without completion and the loop goes on (workers.runners.cli).
            msg = f"this iteration's turn cap (max_turns = {self.max_turns}) is reached; the loop goes on"
            raise final_refusal(api, msg)
        model = body.get("model")
        max_out = _max_output(api, body) or self.default_max_tokens
        try:
            if not isinstance(model, str):
                raise InvalidInput("the request names no model")  # noqa: EM101
            call = self.ledger.admit(model, request_bytes, max_out, count)
        except InvalidInput as exc:
            raise Refused(400, "invalid_request_error", str(exc)) from exc
        except ProjectNotRunning as exc:
            self.note(project_stopped=True, last_error=str(exc))
            raise Refused(400, "invalid_request_error", str(exc)) from exc
        except BudgetExceeded as exc:
            self.note(budget_exhausted=True, last_error=str(exc))
            raise final_refusal(api, str(exc)) from exc
        try:
            admission = self._admit(estimate_tokens(body), call.max_output_tokens)
        except Refused:
            self.ledger.release(call)
            raise
        return Ticket(api=api, call=call, request=_request_content(api, body), admission=admission)

    def admit_count(self, body: dict[str, Any]) -> Admission | None:
        """Room under the rate limits for a harness's ``count_tokens`` call (free upstream, but a
        call all the same: a harness counting in a loop is held to the limits like any other).

        Raises:
            Refused: the count alone is larger than a rate limit, or its room comes too late.
        """
        try:
            return self._admit(estimate_tokens(body), 0)
        except Refused as refused:
            with self._lock:
                self._stats = replace(self._stats, refused=self._stats.refused + 1)
            log.info("iteration %s: a count_tokens call refused: %s", self.claim.iteration_id, refused)
            raise

    def counted(self, admission: Admission | None, input_tokens: int | None) -> None:
        """A ``count_tokens`` call was answered: count it, and replace its estimate with its count."""
        if admission is not None:
            admission.adjust(input_tokens or 0, 0)
        with self._lock:
            self._stats = replace(self._stats, token_counts=self._stats.token_counts + 1)

    def _capped(self) -> bool:
        with self._lock:
            return self.max_turns is not None and self._turns >= self.max_turns

    def _admit(self, size: int, max_out: int) -> Admission | None:
        if self.limiter is None:
            return None

        def waiting(wait_s: float, limit: str) -> None:
            self.emit(RateLimitWait(wait_s=round(wait_s, 2), limit=limit))

        try:
            return self.limiter.acquire(
                self.claim.project_id, self.project_limits, size, max_out, on_wait=waiting
            )
        except CallExceedsRateLimit as exc:
            raise Refused(400, "invalid_request_error", str(exc)) from exc
        except RateLimitWaitTooLong as exc:
            raise Refused(429, "rate_limit_error", str(exc)) from exc

    def settle(self, ticket: Ticket, meter: Meter, duration_s: float) -> None:
        """The call's answer has been relayed: count it as a turn now, provisionally, and read
        it and write it in the background (:class:`~workers.gateway.recorder.Recorder`): the
        call recorded (what was sent, what came back) and its usage charged, once; or, an answer
        that cannot be charged (an error, no usage), its reservation released and the turn
        uncounted. Until then its reservation keeps its worst case in the ledger."""
        if not self._end(ticket):
            return
        with self._lock:
            self._turns += 1
        self._recorder.later(self._record, ticket, meter, duration_s)

    def _record(self, ticket: Ticket, meter: Meter, duration_s: float) -> None:
        metered = meter.result()
        usage = metered.usage
        if usage is None:
            with self._lock:
                self._turns -= 1
            self.note(last_error=metered.error)
            self._give_back(ticket, Usage())
            return
        with self._lock:
            self._tool_calls = _tool_calls(metered.content)
        _adjust(ticket, usage)
        settlement = self.ledger.settle(
            ticket.call,
            metered.content,
            usage,
            model=metered.model,
            request=ticket.request,
            stop_reason=metered.stop_reason,
            duration_s=duration_s,
        )
        with self._lock:
            s = self._stats
            self._stats = replace(
                s,
                calls=s.calls + 1,
                usage=s.usage + usage,
                cost_usd=s.cost_usd + (ticket.call.cost_usd or Decimal(0)),
                last_error=metered.error,
            )
        if settlement is not None and settlement.warn:
            self.emit(BudgetWarning(spent_usd=settlement.spent_usd, limit_usd=settlement.limit_usd))

    def _give_back(self, ticket: Ticket, usage: Usage) -> None:
        _adjust(ticket, usage)
        self.ledger.release(ticket.call)

    def tool_use_id(self, tool: str, args: Any) -> str | None:
        """The id the model gave the call of ``tool`` with ``args`` in its last answer (once each),
        for an MCP call that does not carry it: the key that makes its write idempotent. A CLI
        names our tools its own way (``mcp__raas__memory_write``, ``raas_memory_write``).
        Blocks while that answer is not yet read (not on the event loop)."""
        self._recorder.wait()
        with self._lock:
            for name, given, use_id in self._tool_calls:
                named = name == tool or name.endswith(f"_{tool}")
                if named and given == args and use_id not in self._taken:
                    self._taken.add(use_id)
                    return use_id
        return None

    def fail(self, ticket: Ticket, error: str, *, auth: bool = False) -> Future[None]:
        """The call failed upstream (its usage unknown): release it, charge nothing; done when
        the returned future is (at once for a ticket already settled)."""
        if not self._end(ticket):
            done: Future[None] = Future()
            done.set_result(None)
            return done
        self.note(last_error=error, **({"auth_failed": True} if auth else {}))
        return self._recorder.now(self._give_back, ticket, Usage())

    def _end(self, ticket: Ticket) -> bool:
        """Mark ``ticket`` ended; False if it already was."""
        with self._lock:
            ended, ticket.ended = ticket.ended, True
        return not ended

    def answer_begun(self) -> None:
        """A call's answer has begun: while the harness waits on the model, the lease's earlier
        calls are written (their settlements take the project's row, which the call's
        reservation needed first)."""
        self._recorder.go()

    def wait_written(self) -> None:
        """Wait until every call answered so far is recorded and settled (or released)."""
        self._recorder.wait()


def final_refusal(api: Api, message: str) -> Refused:
    """A refusal no CLI retries, in its API's terms (seen with the pinned binaries): on the Messages
    API, 402 billing_error (an account out of credit), which Claude Code 2.1.330 and OpenCode end
    on at once (a 400 Claude Code sends six times, 429 and 5xx up to ten); on the Responses API a
    400, which Codex 0.169.0 ends on at once (402, 403, 404, 413 and 422 it retries)."""
    if api is Api.RESPONSES:
        return Refused(400, "invalid_request_error", message)
    return Refused(402, "billing_error", message)


def _tool_calls(content: list[dict[str, Any]]) -> list[tuple[str, Any, str]]:
    """(name, arguments, id) of each tool call in an answer: Messages API ``tool_use`` blocks,
    Responses API ``function_call`` items (their arguments a JSON text)."""
    calls: list[tuple[str, Any, str]] = []
    for block in content:
        name = block.get("name")
        if block.get("type") == "tool_use":
            args, use_id = block.get("input"), block.get("id")
        elif block.get("type") == "function_call":
            use_id = block.get("call_id")
            try:
                args = json.loads(block.get("arguments") or "{}")
            except (TypeError, ValueError):
                continue
        else:
            continue
        if isinstance(name, str) and isinstance(use_id, str):
            calls.append((name, args, use_id))
    return calls


def _adjust(ticket: Ticket, usage: Usage) -> None:
    """Replace the call's rate-limit estimate with what it used."""
    if ticket.admission is not None:
        ticket.admission.adjust(usage.input_tokens + usage.cache_creation_input_tokens, usage.output_tokens)


def _max_output(api: Api, body: dict[str, Any]) -> int:
    key = "max_output_tokens" if api is Api.RESPONSES else "max_tokens"
    value = body.get(key)
    return value if isinstance(value, int) and value > 0 else 0


def _request_content(api: Api, body: dict[str, Any]) -> list[Any]:
    """What the call added to the conversation, to record as its user message: the last message
    (Messages API), or the input items after the model's last output (Responses API)."""
    if api is Api.RESPONSES:
        items = body.get("input")
        if isinstance(items, str):
            return [{"type": "text", "text": items}]
        if not isinstance(items, list):
            return []
        tail: list[Any] = []
        for item in reversed(items):
            if isinstance(item, dict) and (
                item.get("role") == "assistant" or item.get("type") in _OUTPUT_ITEMS
            ):
                break
            tail.insert(0, item)
        return tail
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else None
    content = last.get("content") if isinstance(last, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content) if isinstance(content, list) else []


_OUTPUT_ITEMS = frozenset({"function_call", "reasoning", "local_shell_call", "custom_tool_call"})
