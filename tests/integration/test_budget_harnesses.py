"""Budgets are never exceeded, not even by one call (issue #23, point 1), through every harness run
for real: Claude Code, Codex and OpenCode in the iteration's container through the worker's
gateway, and the built-in loop (``api``), against the scripted model.

Each project's agent writes a file with every answer, so nothing but the budget ends its loop.
Two budgets: $0.05, which the iteration's first hold takes whole, and $0.30 on the project's
default model, where the issue saw Claude Code stop one call's worth short ($0.26 and $0.28 spent,
nothing reserved). Both pause ``budget_exceeded`` having spent at most the limit and leaving less
of it than one floor-sized call costs.

The ledger (:class:`workers.ledger.CallLedger`) decides every call as it always does; the tests
only watch what it is asked (:class:`Admissions`), to size a floor-sized call of the very request
it refused. And the gateway holds every settlement back until the harness's next call has been
admitted (:data:`workers.gateway.recorder.HOLD_BACK_S`), as it does whenever a harness calls again
within 50 ms: each call is then decided with the one before it unsettled every time, not only when
the timing falls so (OpenCode's calls, a second apart, never would).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from shared import budget
from shared.errors import BudgetExceeded
from shared.models import PauseReason, ProjectStatus
from shared.pricing import ModelPrice, find_price
from tests.support.engine import Engine, engine
from tests.support.records import iterations, messages, project
from workers.gateway import recorder
from workers.ledger import CallLedger, Count, Ticket, counted_bound, input_bound

pytestmark = [pytest.mark.integration, pytest.mark.docker]

HARNESSES = ["claude-code", "codex", "opencode", "api"]
ANTHROPIC_KEY = "sk-ant-real-anthropic-key-kept-in-the-worker-23"
OPENAI_KEY = "sk-real-openai-key-kept-in-the-worker-23"
# What each answer reports it used, given rather than estimated: fewer input tokens than any
# harness's request holds (the smallest, the built-in loop's ~10 KB, counts ~2,470) and fewer
# output tokens than the floor, so that no call costs more than the worst case its reservation
# was sized by: the premise of spent <= limit (the ledger warns when a call costs more; _check
# looks). Odd numbers, so that no whole number of calls costs exactly $0.05 or $0.30: a rule that
# spends past the limit cannot pass by landing on it.
USAGE = {"input_tokens": 2345, "output_tokens": 987}
# Codex 0.169.0 offers apply_patch only with the model it has metadata for (its default); with
# another model its shell writes the file.
CODEX_PATCHES = "gpt-5.5"


@dataclass
class Admission:
    """One call as the ledger was asked to admit it."""

    request_bytes: int
    asked_tokens: int
    counted: int | None = None  # the provider's count of its input (Messages API), once asked
    granted_tokens: int | None = None  # the output limit it was admitted with; None: refused


class Admissions(list[Admission]):
    """Every call the ledger was asked to admit, in order, and how it was decided."""

    def watch(self, admit: Callable[..., Ticket]) -> Callable[..., Ticket]:
        def watched(
            ledger: CallLedger,
            model: str,
            request_bytes: int,
            max_output_tokens: int,
            count: Count | None = None,
        ) -> Ticket:
            seen = Admission(request_bytes, max_output_tokens)
            self.append(seen)

            def counting() -> int | None:
                assert count is not None
                seen.counted = count()
                return seen.counted

            try:
                ticket = admit(ledger, model, request_bytes, max_output_tokens, counting if count else None)
            except BudgetExceeded:
                if count is not None and seen.counted is None:
                    # The tightest bound the ledger could have used, whether or not it asked.
                    seen.counted = count()
                raise
            seen.granted_tokens = ticket.max_output_tokens
            return ticket

        return watched


@pytest.fixture
def admissions(monkeypatch: pytest.MonkeyPatch) -> Admissions:
    seen = Admissions()
    monkeypatch.setattr(CallLedger, "admit", seen.watch(CallLedger.admit))
    monkeypatch.setattr(recorder, "HOLD_BACK_S", 60.0)  # see the module's docstring
    return seen


@dataclass(frozen=True)
class Spent:
    """A project its budget stopped, and the calls its ledger was asked to admit."""

    project_id: str
    limit_usd: Decimal
    price: ModelPrice
    answered: int  # calls answered (and charged)
    admissions: Admissions = field(repr=False)

    @property
    def spent_usd(self) -> Decimal:
        return project(self.project_id).spent_usd

    def floor_call_usd(self) -> Decimal:
        """The worst case of a floor-sized answer to the request the ledger refused, its input
        bounded as tightly as the ledger could: by the provider's count where the harness's API
        has one (the Messages API), else by the request's size (Codex's Responses API)."""
        refused = self.admissions[-1]
        bound = input_bound(refused.request_bytes)
        if refused.counted is not None:
            bound = min(bound, counted_bound(refused.counted))
        return budget.call_estimate_usd(self.price, bound, budget.FLOOR_OUTPUT_TOKENS)


# ``spend(harness, limit_usd, model, raas_toml)``: see the fixture.
Spend = Callable[[str, Decimal, str, str], Spent]


def _write(harness: str, model: str, n: int) -> dict[str, Any]:
    """The ``n``-th answer: write ``f<n>.txt`` with the harness's own tool."""
    name, text = f"f{n}.txt", f"{n}\n"
    if harness == "claude-code":
        call = {"name": "Write", "input": {"file_path": f"/workspace/{name}", "content": text}}
    elif harness == "opencode":
        call = {"name": "write", "input": {"filePath": f"/workspace/{name}", "content": text}}
    elif harness == "api":
        call = {"name": "write", "input": {"path": name, "content": text}}
    elif model == CODEX_PATCHES:
        call = {
            "name": "apply_patch",
            "input": f"*** Begin Patch\n*** Add File: {name}\n+{n}\n*** End Patch\n",
        }
    else:
        call = {"name": "exec_command", "input": {"cmd": f"echo {n} > {name}", "yield_time_ms": 5000}}
    return {"content": [{"type": "tool_use", **call}], "usage": USAGE}


def _script(harness: str, model: str, price: ModelPrice, limit_usd: Decimal) -> dict[str, Any]:
    """An answer writing a file for every call the limit could pay, and a few more (a rule that
    spends past the limit makes more calls than the ledger's)."""
    per_call = USAGE["input_tokens"] * price.input + USAGE["output_tokens"] * price.output
    calls = int(limit_usd * budget.MILLION / per_call) + 3
    return {"responses": [_write(harness, model, n) for n in range(calls)]}


@pytest.fixture
def spend(
    services: dict[str, str], tmp_path: Path, admissions: Admissions, caplog: pytest.LogCaptureFixture
) -> Iterator[Spend]:
    """``spend(harness, limit_usd, model, raas_toml)``: a project writing a file with every answer,
    run iteration after iteration until nothing more is sent, and checked for what every budget
    test asks of it (:func:`_check`)."""
    caplog.set_level(logging.WARNING, logger="workers.ledger")
    with ExitStack() as stack:

        def run(harness: str, limit_usd: Decimal, model: str, raas_toml: str) -> Spent:
            price = find_price(model)
            assert price is not None
            script = _script(harness, model, price, limit_usd)
            settings = {"anthropic_api_key": SecretStr(ANTHROPIC_KEY), "harness_timeout_s": 120.0}
            eng = stack.enter_context(engine(script, tmp_path, **settings))
            eng.settings = eng.settings.model_copy(
                update={
                    "openai_api_key": SecretStr(OPENAI_KEY),
                    "openai_base_url": f"{eng.model.base_url}/v1",
                }
            )
            toml = f'harness = "{harness}"\n{raas_toml}[budget]\nlimit_usd = {limit_usd}\n'
            project_id = eng.submit(prompt="Write one file after another.", raas_toml=toml)
            eng.run_to_end(project_id)
            assert not eng.dispatcher.pending(project_id)
            answered = len([m for m in messages(project_id) if m.role == "assistant"])
            spent = Spent(project_id, limit_usd, price, answered, admissions)
            _check(eng, spent, model, caplog)
            return spent

        yield run


def _check(eng: Engine, spent: Spent, model: str, caplog: pytest.LogCaptureFixture) -> None:
    """What every budget test asks of a project its budget stopped."""
    paused = project(spent.project_id)
    errors = [i.error for i in iterations(spent.project_id)]
    assert paused.status is ProjectStatus.PAUSED, errors
    assert paused.pause_reason is PauseReason.BUDGET_EXCEEDED, (paused.status_reason, errors)
    assert paused.reserved_usd == 0
    # It made calls: the budget did not refuse the first
    assert spent.answered >= 1, spent.admissions
    assert paused.spent_usd == sum(m.cost_usd for m in messages(spent.project_id))
    # Every call the harness made went through the one ledger, on the project's model (OpenCode's
    # small model too: it is given the same, and with its session's title makes no side-request),
    # and only the last was refused, once: no harness retried the refusal
    logged = eng.requests(spent.project_id)
    requests = [r for r in logged if r.path != "/v1/messages/count_tokens"]
    assert len(requests) == spent.answered
    # and the gateway's own counts of a request (near the budget's end) carry the project too
    counted = [a for a in spent.admissions if a.counted is not None]
    assert len(logged) - len(requests) == len(counted), [r.path for r in logged]
    assert {(r.body["model"], r.side_request) for r in requests} == {(model, None)}
    assert [a.granted_tokens is None for a in spent.admissions] == [False] * spent.answered + [True]
    # each answered call cost no more than its reservation (the premise of spent <= limit)
    assert not [r.getMessage() for r in caplog.records if "above its worst case" in r.getMessage()]
    # and wrote its file: only the budget ended the loop
    written = {name for i in iterations(spent.project_id) for name in i.files_changed or []}
    assert written == {f"f{n}.txt" for n in range(spent.answered)}


def _small(harness: str) -> tuple[str, str]:
    """The model and raas.toml of a $0.05 project: a model one floor-sized call of whose request
    $0.05 can pay at all. Claude Code's request is ~89 KB (its system prompt and tools), ~22,300
    tokens by the provider's count, the tightest bound: a floor-sized call of it costs ~$0.10 on
    the default claude-sonnet-4-6 ($3/$15 per million, cache writes $3.75), ~$0.034 on
    claude-haiku-4-5 ($1/$5). Codex's, 41 KB to 46 KB by model, is bounded by its size alone (the
    Responses API has no count): ~$0.063 on its default gpt-5.5 ($1.25/$10), ~$0.014 on
    gpt-5-mini ($0.25/$2).

    max_tokens = 32,000 (what Claude Code and OpenCode ask for by themselves; Codex asks for
    nothing and the gateway bounds it by max_tokens): the coordinator's first hold, a first
    call's estimate with it, is then the whole $0.05, so a call that counted its own iteration's
    hold against itself could never be made (the issue's first report).
    """
    if harness == "codex":
        return "gpt-5-mini", 'max_tokens = 32000\n[harnesses.codex]\nmodel = "gpt-5-mini"\n'
    return "claude-haiku-4-5", 'model = "claude-haiku-4-5"\nmax_tokens = 32000\n'


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_small_budget_pays_calls_until_its_limit_and_never_more(spend: Spend, harness: str) -> None:
    # Given a $0.05 project whose agent writes a file with every answer
    model, raas_toml = _small(harness)
    # When it runs until its budget stops it
    spent = spend(harness, Decimal("0.05"), model, raas_toml)

    # Then it made calls (every test checks it) and spent at most $0.05
    assert spent.spent_usd <= spent.limit_usd
    # And what it left could not pay a floor-sized answer to its next request
    unspent = spent.limit_usd - spent.spent_usd
    assert unspent < spent.floor_call_usd(), (unspent, spent.floor_call_usd(), spent.admissions[-2:])


@pytest.mark.parametrize("harness", HARNESSES)
def test_a_budget_is_spent_to_within_one_floor_sized_call_and_never_past_it(
    spend: Spend, harness: str
) -> None:
    # Given a $0.30 project on its default model (claude-sonnet-4-6; Codex's gpt-5.5) whose agent
    # writes a file with every answer
    model = "gpt-5.5" if harness == "codex" else "claude-sonnet-4-6"
    # When it runs until its budget stops it
    spent = spend(harness, Decimal("0.30"), model, "")

    # Then it spent at most $0.30
    assert spent.spent_usd <= spent.limit_usd
    # And less is left than the worst case of a 1,024-token answer to the very request the ledger
    # refused, its input bounded as tightly as the ledger could (the provider's count on the
    # Messages API, the request's size on Codex's Responses API). A rule that reserves a call's
    # whole output limit (32,000 tokens from Claude Code: ~$0.57 on this model) stops with far
    # more left, as one that refuses with an earlier call unsettled does
    unspent = spent.limit_usd - spent.spent_usd
    assert unspent < spent.floor_call_usd(), (unspent, spent.floor_call_usd(), spent.admissions[-2:])
