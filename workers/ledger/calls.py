"""One attempt's calls against the budget: :class:`CallLedger` and its :class:`Ticket`; the
rule is the package's docstring, the statements :mod:`workers.ledger.writes`."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from shared import budget
from shared.budget import Settlement
from shared.errors import BudgetExceeded, InvalidInput, ProjectNotRunning
from shared.models import (
    ProjectStatus,
    utcnow,
)
from shared.pricing import ModelPrice, cost_usd, find_price
from shared.usage import Usage
from workers.claim import Claim
from workers.ledger import writes

log = logging.getLogger(__name__)

# How long a call waits for budget other iterations' calls hold, and how often it looks.
BUDGET_WAIT_S = 300.0
BUDGET_POLL_S = 0.25
NOT_RUNNING = "the project is no longer running (paused or stopped)"
BUDGET_SPENT = "the project's budget is spent; raise it with `raas budget ID --limit USD`"
# Tokens a provider adds to a request's own (its tool-use system prompt: 346 on Claude 4 models):
# added to the byte bound, which counts only what the request holds.
PROVIDER_OVERHEAD_TOKENS = 512
# The provider's count (Anthropic's count_tokens) is documented as an estimate that "may differ
# by a small amount" from what a call is billed; this much more is reserved over it.
COUNT_MARGIN = Decimal("1.05")
# How many times a reservation raced by other calls is tried again before waiting.
RACES = 5

Count = Callable[[], int | None]


def input_bound(request_bytes: int) -> int:
    """The most input tokens a request of ``request_bytes`` (its UTF-8 JSON) can be billed for."""
    return request_bytes + PROVIDER_OVERHEAD_TOKENS


def counted_bound(counted: int) -> int:
    """The most input tokens a request the provider counted as ``counted`` is billed for."""
    return math.ceil(counted * COUNT_MARGIN) + 1


@dataclass
class Ticket:
    """One admitted call: what it may ask for and what it holds until settled or released."""

    model: str
    price: ModelPrice
    asked_tokens: int  # the output limit the caller asked for
    max_output_tokens: int  # what it may send: lower when the budget cannot pay more
    input_tokens: int  # the bound its reservation was sized by
    held: Decimal  # settling or releasing it gives back exactly this
    ended: bool = field(default=False, compare=False)
    cost_usd: Decimal | None = None  # what it was charged, once settled

    @property
    def lowered(self) -> bool:
        return self.max_output_tokens < self.asked_tokens


@dataclass
class _Admission:
    """One call's way through :meth:`CallLedger.admit`."""

    bound: int  # input tokens its worst case is sized by
    count: Count | None  # not yet asked
    deadline: float
    drained: bool = False
    races: int = 0
    looked_again: bool = False


class CallLedger:
    """One attempt's model calls against its project's budget, and their messages.

    Thread-safe: the gateway admits a call while an earlier one of the same lease is settled in
    its recorder's thread. ``drain`` (the gateway's) runs the lease's held-back settlements now,
    so that a refusal is never decided while an earlier call is unsettled.
    """

    def __init__(
        self,
        claim: Claim,
        *,
        drain: Callable[[], None] | None = None,
        wait_s: float = BUDGET_WAIT_S,
        poll_s: float = BUDGET_POLL_S,
        url: str | None = None,
    ) -> None:
        self.claim = claim
        self._drain = drain
        self.wait_s = wait_s
        self.poll_s = poll_s
        self._url = url  # None: the settings' database
        self._lock = threading.Condition()
        self._free: Decimal | None = None  # the iteration's hold no call has drawn on yet
        self._open = 0  # admitted calls not yet settled or released
        self._seq = 0

    @property
    def own_hold(self) -> Decimal:
        """The iteration's own hold (the coordinator's) that no call has drawn on yet."""
        with self._lock:
            return self._free if self._free is not None else Decimal(0)

    # -- admission -----------------------------------------------------------------------------

    def price_of(self, model: str) -> ModelPrice:
        price = find_price(model, self.claim.config.pricing)
        if price is None:
            msg = f"model {model!r} has no price: add it under [pricing] in raas.toml"
            raise InvalidInput(msg)
        return price

    def admit(
        self, model: str, request_bytes: int, max_output_tokens: int, count: Count | None = None
    ) -> Ticket:
        """Reserve the call's worst case, its output limit lowered to what the budget pays.

        ``request_bytes``: the request's UTF-8 size, its input's bound. ``count``: asks the
        provider for the request's input tokens (None if it cannot), tried when the byte bound
        would lower or refuse the call.

        Raises:
            InvalidInput: the model has no price.
            ProjectNotRunning: the project was paused or stopped.
            BudgetExceeded: not even a floor-sized answer fits in what remains.
        """
        price = self.price_of(model)
        call = _Admission(input_bound(request_bytes), count, time.monotonic() + self.wait_s)
        ticket = self._reserve_at_once(model, price, call.bound, max_output_tokens)
        if ticket is not None:
            return ticket
        floor = max(1, min(budget.FLOOR_OUTPUT_TOKENS, max_output_tokens))
        while True:
            fits = budget.output_that_fits(price, call.bound, max_output_tokens, self._affordable())
            if fits < max_output_tokens and self._make_room(call):
                continue
            if fits >= floor:
                ticket = self._reserve(model, price, call.bound, max_output_tokens, fits)
                if ticket is not None:
                    return ticket
                call.races += 1
                if call.races < RACES:
                    continue  # another call took the room meanwhile: look again
            if time.monotonic() < call.deadline and writes.others_hold_reservations(self.claim, self._url):
                # What other iterations' calls do not spend comes back. This iteration's own
                # unused hold goes back first: idle holds waiting on each other would wait for
                # ever (two iterations, each short of a call, each keeping part of the money).
                self._give_up_own_hold()
                time.sleep(self.poll_s)
                call.races, call.looked_again = 0, False
                continue
            if not call.looked_again:
                # Nothing held elsewhere now; what an ending call gave back since this call
                # looked is seen by one more look, not lost to a refusal.
                call.looked_again = True
                continue
            raise BudgetExceeded(BUDGET_SPENT)

    def _make_room(self, call: _Admission) -> bool:
        """Before a call is lowered or refused, what could let it be sized by more: this attempt's
        earlier calls settled, the provider's count of the input. False: nothing more to try."""
        if not call.drained:
            call.drained = True
            if self._settle_earlier():
                return True
        if call.count is not None:
            count, call.count = call.count, None
            tokens = count()
            if tokens is not None and counted_bound(tokens) < call.bound:
                call.bound = counted_bound(tokens)
                return True
        return False

    def _affordable(self) -> Decimal:
        """What the next call may hold: what the project has left, and the iteration's own hold."""
        remaining, status, held = writes.standing(self.claim, self._url)
        if status != ProjectStatus.RUNNING:
            raise ProjectNotRunning(NOT_RUNNING)
        with self._lock:
            if self._free is None:
                # The coordinator's hold, or what a dead attempt left: this attempt's own money.
                self._free = held
            return max(remaining, Decimal(0)) + self._free

    def _reserve_at_once(self, model: str, price: ModelPrice, bound: int, asked: int) -> Ticket | None:
        """The whole call reserved by one conditional UPDATE, with no look at the remainder first:
        the common case (the budget pays the full output limit) costs one round trip, not two.

        Only once the attempt knows its own hold, and only when the hold does not pay the call
        (the UPDATE is then also the check that the project still runs). None: the careful way
        decides (it looks, settles, counts, lowers).
        """
        with self._lock:
            if self._free is None or self._free >= budget.call_estimate_usd(price, bound, asked):
                return None
        return self._reserve(model, price, bound, asked, asked)

    def _reserve(self, model: str, price: ModelPrice, bound: int, asked: int, tokens: int) -> Ticket | None:
        worst = budget.call_estimate_usd(price, bound, tokens)
        with self._lock:
            free = self._free or Decimal(0)
            taken = min(free, worst)
            self._free = free - taken
        needed = worst - taken
        reserved = writes.reserve_if_running(self.claim, needed, self._url) if needed > 0 else True
        if reserved is None:
            self._give_back_free(taken)
            raise ProjectNotRunning(NOT_RUNNING)
        if not reserved:
            self._give_back_free(taken)
            return None
        with self._lock:
            self._open += 1
        if tokens < asked:
            log.info(
                "iteration %s: a call's output limit lowered from %d to %d tokens (the budget pays no more)",
                self.claim.iteration_id,
                asked,
                tokens,
            )
        return Ticket(model, price, asked, tokens, bound, worst)

    def _give_up_own_hold(self) -> None:
        """Return the iteration's unused hold to the project, where any of its calls may take it."""
        with self._lock:
            amount, self._free = self._free or Decimal(0), Decimal(0)
        if amount > 0:
            writes.release(self.claim, amount, self._url)

    def _give_back_free(self, amount: Decimal) -> None:
        with self._lock:
            self._free = (self._free or Decimal(0)) + amount

    def _settle_earlier(self) -> bool:
        """Let this attempt's admitted calls settle, their unspent worst case coming back; False
        when none was open."""
        with self._lock:
            if not self._open:
                return False
        if self._drain is not None:
            self._drain()
        with self._lock:
            self._lock.wait_for(lambda: self._open == 0, timeout=self.wait_s)
        return True

    # -- settlement ----------------------------------------------------------------------------

    def settle(
        self,
        ticket: Ticket,
        answer: list[Any],
        usage: Usage,
        *,
        model: str | None = None,
        request: list[Any] | None = None,
        stop_reason: str | None = None,
        duration_s: float | None = None,
    ) -> Settlement | None:
        """Record the call (what was sent, if given, and its answer), charge its usage, priced by
        ``model`` (the one that answered; the one asked for if that has no price), and give back
        what it held: in one transaction, once. None if the ticket was already ended."""
        if not self._end(ticket):
            return None
        answered = model if model and find_price(model, self.claim.config.pricing) else ticket.model
        price = find_price(answered, self.claim.config.pricing) or ticket.price
        cost = ticket.cost_usd = cost_usd(usage, price)
        if cost > ticket.held:
            log.warning(
                "iteration %s: a call cost $%s, above its worst case $%s (the provider billed more "
                "input than its request's size)",
                self.claim.iteration_id,
                cost,
                ticket.held,
            )
        now = utcnow()
        rows = []
        with self._lock:
            if request is not None:
                rows.append(self._row("user", request, None, Usage(), None, Decimal(0), None, now))
            rows.append(self._row("assistant", answer, answered, usage, stop_reason, cost, duration_s, now))
        try:
            return writes.write_call(self.claim, rows, usage, cost, ticket.held, self._url)
        finally:
            self._ended()

    def release(self, ticket: Ticket) -> None:
        """Give back what a call that failed holds (its usage is unknown: nothing is charged)."""
        if not self._end(ticket):
            return
        try:
            writes.release(self.claim, ticket.held, self._url)
        finally:
            self._ended()

    def record(self, role: str, content: list[Any]) -> None:
        """Record a message that is no model call's answer (an opening, tool results, a note)."""
        with self._lock:
            row = self._row(role, content, None, Usage(), None, Decimal(0), None, utcnow())
        writes.write_messages([row], self._url)

    def _end(self, ticket: Ticket) -> bool:
        with self._lock:
            ended, ticket.ended = ticket.ended, True
        return not ended

    def _ended(self) -> None:
        with self._lock:
            self._open -= 1
            self._lock.notify_all()

    def _row(
        self,
        role: str,
        content: list[Any],
        model: str | None,
        usage: Usage,
        stop_reason: str | None,
        cost: Decimal,
        duration_s: float | None,
        now: datetime,
    ) -> dict[str, Any]:
        """A ``Message`` row, numbered in the order it is asked for (under the lock)."""
        seq, self._seq = self._seq, self._seq + 1
        claim = self.claim
        return {
            "project_id": claim.project_id,
            "agent_id": claim.agent_id,
            "iteration_id": claim.iteration_id,
            "attempt": claim.attempt,
            "seq": seq,
            "role": role,
            "content": content,
            "model": model,
            "stop_reason": stop_reason,
            **usage.model_dump(),  # the columns are named as Usage's fields
            "cost_usd": cost,
            "duration_s": duration_s,
            "created_at": now,
        }
