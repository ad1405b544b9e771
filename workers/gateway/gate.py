"""The gate each harness model call passes, with the ledger the api harness uses: the budget
reserves the call's worst case first, if the project still runs
(:func:`workers.records.reserve_if_running`, the same wait as ``reserve_call_waiting``), the rate
limits admit it (:class:`workers.llm.ratelimit.RateLimiter`), and its answer is recorded and
priced once (:func:`workers.records.store_call`, which settles the reservation) — or, when it
failed, the reservation is released and nothing is charged.

Each call holds its own reservation (the lease's first also takes over what the iteration held)
and gives back exactly that: the record and settlement run after the answer's last byte
(:mod:`workers.gateway.recorder`), and the lease's next call may reserve meanwhile. What could
refuse a call on account of a record not yet written (the budget, the turn cap) waits for it
and asks again.

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
from typing import Any, Literal

from shared import budget
from shared.errors import CallExceedsRateLimit, RateLimitWaitTooLong
from shared.event_payloads import BudgetWarning, RateLimitWait
from shared.events import EventData
from shared.pricing import cost_usd, find_price
from shared.usage import Usage
from workers import records
from workers.gateway.metering import Api, Meter
from workers.gateway.recorder import Recorder
from workers.llm.ratelimit import Admission, ProjectLimits, RateLimiter
from workers.llm.tokens import estimate_tokens
from workers.records import Claim

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
    """One admitted call: what it reserved against and what it sent."""

    api: Api
    model: str
    request: list[Any]
    admission: Admission | None
    held: Decimal  # what the call holds in the ledger: its settlement or release gives back this
    ended: bool = False  # settled or failed: the first of the two counts, once


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
        self._seq = 0
        # Whether a call has taken over what the iteration held when the lease opened.
        self._took_over = False
        # What an answered call writes to the ledger, written after its answer (in ``pool``).
        self._recorder = Recorder(pool, loop, self._unrecorded)
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

    def admit(self, api: Api, body: dict[str, Any]) -> Ticket:
        """Reserve the call's worst case and wait for room under the rate limits.

        Raises:
            Refused: the project does not run, the model has no price, the budget is spent, or
                the call alone is larger than a rate limit.
        """
        try:
            return self._admit_call(api, body)
        except Refused as refused:
            with self._lock:
                self._stats = replace(self._stats, refused=self._stats.refused + 1)
            log.info("iteration %s: a %s call refused: %s", self.claim.iteration_id, api.value, refused)
            raise

    def _admit_call(self, api: Api, body: dict[str, Any]) -> Ticket:
        capped = self._capped()
        if capped and self._recorder.busy():
            # An answer not yet read counts as a turn until read: it may turn out to be none.
            self._recorder.wait()
            capped = self._capped()
        if capped:
            self.note(max_turns_reached=True, last_error=f"the turn cap ({self.max_turns}) is reached")
            # The iteration ends without completion and the loop goes on (workers.harness.ending).
            msg = f"this iteration's turn cap (max_turns = {self.max_turns}) is reached; the loop goes on"
            raise final_refusal(api, msg)
        model = body.get("model")
        price = find_price(model, self.claim.config.pricing) if isinstance(model, str) else None
        if price is None:
            msg = f"model {model!r} has no price: add it under [pricing] in raas.toml"
            raise Refused(400, "invalid_request_error", msg)
        size = estimate_tokens(body)
        max_out = _max_output(api, body) or self.default_max_tokens
        held = self._reserve(budget.call_estimate_usd(price, size, max_out))
        if held is None:
            self.note(project_stopped=True, last_error="the project is no longer running")
            raise Refused(
                400, "invalid_request_error", "the project is no longer running (paused or stopped)"
            )
        if held is False:
            self.note(budget_exhausted=True, last_error=records.BUDGET_SPENT)
            raise final_refusal(api, records.BUDGET_SPENT)
        self._took_over = True
        try:
            admission = self._admit(size, max_out)
        except Refused:
            records.release_call(self.claim, held)
            raise
        request = _request_content(api, body)
        return Ticket(api=api, model=str(model), request=request, admission=admission, held=held)

    def _capped(self) -> bool:
        with self._lock:
            return self.max_turns is not None and self._turns >= self.max_turns

    def _reserve(self, amount: Decimal) -> Decimal | Literal[False] | None:
        # Whether the project runs and the reservation together: on Postgres one statement.
        held = records.reserve_if_running(self.claim, amount, take_over=not self._took_over)
        if held is False and self._recorder.busy():
            # The lease's answered calls hold their worst case until written; what they did not
            # spend comes back then.
            self._recorder.wait()
            held = records.reserve_if_running(self.claim, amount, take_over=not self._took_over)
        return held

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
        pricing = self.claim.config.pricing
        # Priced by the model that answered; by the one asked for if that has no price (never free).
        model = metered.model if metered.model and find_price(metered.model, pricing) else ticket.model
        price = find_price(model, pricing)
        cost = cost_usd(usage, price) if price is not None else Decimal(0)
        with self._lock:
            seq, self._seq = self._seq, self._seq + 2
            self._tool_calls = _tool_calls(metered.content)
            s = self._stats
            self._stats = replace(
                s,
                calls=s.calls + 1,
                usage=s.usage + usage,
                cost_usd=s.cost_usd + cost,
                last_error=metered.error,
            )
        _adjust(ticket, usage)
        settlement = records.store_call(
            self.claim,
            seq,
            ticket.request,
            metered.content,
            model=model,
            usage=usage,
            held=ticket.held,
            stop_reason=metered.stop_reason,
            duration_s=duration_s,
        )
        if settlement.warn:
            self.emit(BudgetWarning(spent_usd=settlement.spent_usd, limit_usd=settlement.limit_usd))

    def _give_back(self, ticket: Ticket, usage: Usage) -> None:
        _adjust(ticket, usage)
        records.release_call(self.claim, ticket.held)

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
