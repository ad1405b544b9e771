"""The one ledger of every model call (DESIGN.md rules 1 and 9): admit, settle, release, and the
``Message`` rows, whoever makes the call — the built-in loop or an agent CLI through the gateway.

A :class:`CallLedger` is one attempt's. :meth:`CallLedger.admit` reserves the call's worst case
before it goes upstream: its input bounded by the request's UTF-8 size (no tokenizer makes more
tokens than bytes), every input token at the cache-write price, every output token used. When
what remains cannot pay that, the call's output limit is lowered to what it can pay; only when
not even :data:`~shared.budget.FLOOR_OUTPUT_TOKENS` fit is it refused
(:class:`~shared.errors.BudgetExceeded`). Before lowering or refusing, the ledger lets what
could make room come first: this attempt's earlier calls are settled (their unspent worst case
comes back), the provider's own count may replace the byte bound (see :data:`COUNT_MARGIN`),
and other iterations' calls in flight are waited for. A settlement charges the call's real
usage, which is never above its worst case, so ``spent <= limit`` holds for any number of
workers, harnesses and subagents.

The iteration's first hold (the coordinator's, :func:`shared.budget.admit`) is its own money:
its calls draw on it first and never count it against themselves; what they leave is given back
when the iteration ends (:mod:`workers.records`).
"""

from workers.ledger.calls import (
    BUDGET_SPENT,
    COUNT_MARGIN,
    PROVIDER_OVERHEAD_TOKENS,
    CallLedger,
    Count,
    Ticket,
    counted_bound,
    input_bound,
)

__all__ = [
    "BUDGET_SPENT",
    "COUNT_MARGIN",
    "PROVIDER_OVERHEAD_TOKENS",
    "CallLedger",
    "Count",
    "Ticket",
    "counted_bound",
    "input_bound",
]
