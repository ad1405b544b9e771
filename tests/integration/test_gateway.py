"""The LLM gateway keeps the api harness's promises for every harness call (DESIGN.md rule 9).

A real claimed iteration (real Postgres, Redis, coordinator) leases a gateway socket; requests
go through it as a harness's would, to the scripted model behind a loopback tap that keeps what
the gateway sent upstream. The key the worker holds must reach the model and nothing else; the
answer must come back byte for byte; each call is reserved before it goes, charged once from its
own usage, and recorded.
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections.abc import Iterator
from contextlib import closing, contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from pydantic import SecretStr

from shared.db import session_scope
from shared.events import EventData
from shared.models import Project, ProjectStatus
from tests.support.engine import Engine, engine
from tests.support.records import STREAMS, messages, project, replay, text
from tests.support.relay import relay_on_host
from workers.claim import claim_iteration
from workers.gateway import Gateway, GatewayLease
from workers.llm.ratelimit import ProviderLimits, RateLimiter, key_fingerprint
from workers.scripted_model.script import Script

pytestmark = [pytest.mark.integration]

REAL_KEY = f"sk-ant-api03-real-{secrets.token_hex(16)}"
ONE_CALL = {"responses": [text("done")], "when_exhausted": "repeat_last"}


class Tap:
    """Loopback TCP in front of the scripted model, keeping every byte the gateway sent it."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("http://").split(":")
        self.target = (host, int(port))
        self.sent = bytearray()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, source: socket.socket, target: socket.socket, keep: bool) -> None:
        try:
            while data := source.recv(65536):
                if keep:
                    self.sent += data
                target.sendall(data)
        except OSError:
            pass
        finally:
            target.close()

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(ONE_CALL, tmp_path) as running:
        yield running


@pytest.fixture
def tap(eng: Engine) -> Iterator[Tap]:
    tapped = Tap(eng.model.base_url)
    yield tapped
    tapped.close()


@pytest.fixture
def gateway(eng: Engine, tap: Tap) -> Iterator[Gateway]:
    settings = eng.settings.model_copy(
        update={"anthropic_api_key": SecretStr(REAL_KEY), "anthropic_base_url": tap.url}
    )
    made = Gateway(settings, limiter=None, publish=None)
    yield made
    made.close()


@contextmanager
def lease_for(
    eng: Engine, gateway: Gateway, raas_toml: str = "", script: dict[str, Any] | None = None
) -> Iterator[tuple[str, GatewayLease, list[EventData]]]:
    """A submitted project's first iteration, claimed, with a gateway lease for it."""
    if script is not None:
        eng.model.reset(Script.model_validate(script))
    project_id = eng.submit(raas_toml=raas_toml)
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    claim = claim_iteration(iteration_id, "gateway-test", stale_after_s=30)
    assert claim is not None
    emitted: list[EventData] = []
    with gateway.open(claim, emitted.append) as lease:
        yield project_id, lease, emitted


def held_by_calls(project_id: str, lease: GatewayLease) -> Decimal:
    """What the project's calls still hold: its reservations but the iteration's own first hold
    that no call drew on (given back when the iteration ends, :func:`workers.records.finish`)."""
    return project(project_id).reserved_usd - lease.gate.ledger.own_hold


def client(lease: GatewayLease) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(lease.socket_path)), base_url="http://localhost"
    )


def message_body(project_id: str, **extra: Any) -> dict[str, Any]:
    """A streamed Messages request as a harness sends it; ``extra`` replaces or adds fields."""
    return {
        "model": "claude-sonnet-4-6",
        "max_tokens": 1000,
        "stream": True,
        "messages": [{"role": "user", "content": "Do the task."}],
        "metadata": {"user_id": project_id},
        **extra,
    }


def call(lease: GatewayLease, project_id: str, *, token: str | None = None, **extra: Any) -> httpx.Response:
    body = message_body(project_id, **extra)
    headers = {"x-api-key": token or lease.token, "anthropic-version": "2023-06-01"}
    with client(lease) as http:
        return http.post("/v1/messages?beta=true", json=body, headers=headers)


def test_a_streamed_call_is_relayed_byte_for_byte_with_the_real_key_and_charged_once(
    eng: Engine, gateway: Gateway, tap: Tap
) -> None:
    # Given a lease whose project's model answers with a recorded stream
    script = {"responses": [replay("basic_response.txt")], "when_exhausted": "repeat_last"}
    with lease_for(eng, gateway, script=script) as (project_id, lease, _):
        # When a harness calls through the socket with its token
        response = call(lease, project_id)
        stats = lease.stats()
        directory = lease.directory
        listing = {path.name: path.stat().st_mode & 0o777 for path in directory.iterdir()}

    # Then the stream comes back unchanged
    assert response.status_code == 200
    assert response.content == (STREAMS / "basic_response.txt").read_bytes()
    # and upstream got the real key, the project's session header, and never the token
    sent = bytes(tap.sent)
    assert f"x-api-key: {REAL_KEY}".encode() in sent
    assert f"x-raas-session: {project_id}".encode() in sent
    assert lease.token.encode() not in sent
    # and the call is recorded once, priced by our table from the stream's own usage
    rows = messages(project_id)
    assert [row.role for row in rows] == ["user", "assistant"]
    reply = rows[1]
    assert (reply.input_tokens, reply.output_tokens) == (11, 6)
    assert reply.cost_usd == Decimal("0.000123")  # 11 x $3 + 6 x $15 per million (the asked model)
    assert stats.calls == 1
    assert stats.cost_usd == reply.cost_usd
    assert project(project_id).spent_usd == reply.cost_usd
    # and the key is nowhere the container sees: not in the answer, not in the socket directory
    assert REAL_KEY not in response.text
    assert listing == {"llm.sock": 0o666}
    assert not directory.exists()


def test_a_wrong_or_revoked_token_is_refused_and_nothing_is_recorded(eng: Engine, gateway: Gateway) -> None:
    with lease_for(eng, gateway) as (project_id, lease, _):
        wrong = call(lease, project_id, token="raas-gw-guessed")
        with client(lease) as http:
            bearer = http.post("/v1/messages", json={}, headers={"authorization": f"Bearer {REAL_KEY}"})
        lease.close()
        # Then, closed, it serves no one, whatever the token
        with socket.socket(socket.AF_UNIX) as raw, pytest.raises((FileNotFoundError, ConnectionRefusedError)):
            raw.connect(str(lease.socket_path))

    assert wrong.status_code == bearer.status_code == 401
    assert wrong.json()["error"]["type"] == "authentication_error"
    assert eng.requests(project_id) == []
    assert messages(project_id) == []


def test_only_the_model_endpoints_are_served(eng: Engine, gateway: Gateway) -> None:
    with lease_for(eng, gateway) as (project_id, lease, _), client(lease) as http:
        auth = {"x-api-key": lease.token}
        other = http.post("/v1/files", json={}, headers=auth)
        listing = http.get("/v1/models", headers=auth)
        wrong_method = http.get("/v1/messages", headers=auth)
        counted = http.post(
            "/v1/messages/count_tokens",
            json={"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "hi"}]},
            headers=auth,
        )

    assert other.status_code == listing.status_code == 404
    assert other.json()["error"]["type"] == "not_found_error"
    assert wrong_method.status_code == 405
    assert counted.status_code == 200
    assert counted.json()["input_tokens"] > 0
    assert [r.path for r in eng.model.requests()] == ["/v1/messages/count_tokens"]
    assert messages(project_id) == []  # counting tokens is free and is not a call


def test_a_lease_answers_only_its_harness_api(eng: Engine, gateway: Gateway) -> None:
    # Given a Claude Code lease and a Codex lease
    with lease_for(eng, gateway, 'harness = "claude-code"\n') as (project_id, claude, _):
        # When Claude Code's lease is asked for the Responses API
        responses = call_responses(claude)
    with lease_for(eng, gateway, 'harness = "codex"\n') as (_, codex, _), client(codex) as http:
        # and Codex's for the Messages API and count_tokens
        auth = {"authorization": f"Bearer {codex.token}"}
        asked = [
            http.post(path, json=message_body(project_id), headers=auth)
            for path in ("/v1/messages", "/v1/messages/count_tokens")
        ]
        codex_stats = codex.stats()

    # Then each is a 404 naming the harness, and nothing went upstream or was recorded
    assert responses.status_code == 404
    assert "claude-code" in responses.json()["error"]["message"]
    assert [a.status_code for a in asked] == [404, 404]
    assert "codex" in asked[0].json()["error"]["message"]
    assert eng.model.requests() == []
    assert codex_stats.calls == codex_stats.token_counts == 0


def test_count_tokens_passes_the_rate_limits_and_is_counted(
    eng: Engine, services: dict[str, str], tap: Tap, tmp_path: Path
) -> None:
    # Given a worker gateway with the cluster's rate limiter, and a project allowed one call an hour
    settings = eng.settings.model_copy(
        update={"anthropic_api_key": SecretStr(REAL_KEY), "anthropic_base_url": tap.url}
    )
    fingerprint = key_fingerprint(f"gateway-{tmp_path.name}")
    limiter = RateLimiter(redis.Redis.from_url(services["redis_url"]), ProviderLimits(), fingerprint)
    body = {"model": "claude-sonnet-4-6", "messages": [{"role": "user", "content": "hi"}]}
    with (
        closing(Gateway(settings, limiter=limiter, publish=None)) as limited,
        lease_for(eng, limited, "[rate_limit]\ncalls_per_hour = 1\n") as (project_id, lease, _),
        client(lease) as http,
    ):
        # When the harness counts tokens twice, then calls the model
        counts = [
            http.post("/v1/messages/count_tokens", json=body, headers={"x-api-key": lease.token})
            for _ in range(2)
        ]
        answer = call(lease, project_id)
        stats = lease.stats()

    # Then the first count was answered and counted, the second refused by the limit (its room an
    # hour away: more than a call waits), and the model call too: the count was the hour's call
    assert [c.status_code for c in counts] == [200, 429]
    assert counts[1].json()["error"]["type"] == "rate_limit_error"
    assert counts[1].headers["x-should-retry"] == "false"
    assert answer.status_code == 429
    assert stats.token_counts == 1
    assert stats.refused == 2
    assert [r.path for r in eng.model.requests()] == ["/v1/messages/count_tokens"]
    assert messages(project_id) == []  # a count is no call of the model: no message, no charge


def test_a_spent_budget_is_refused_as_billing_and_nothing_is_sent_upstream(
    eng: Engine, gateway: Gateway
) -> None:
    # Given a project whose first call spends more than half its budget
    toml = "max_tokens = 1000\n[budget]\nlimit_usd = 0.031\n"
    script = {"responses": [text("spent", usage={"input_tokens": 800, "output_tokens": 1000})]}
    with lease_for(eng, gateway, toml, script) as (project_id, lease, _):
        first = call(lease, project_id)
        # When the harness calls again
        second = call(lease, project_id)
        stats = lease.stats()

    # Then the call is refused with a 4xx a harness does not retry, and never leaves the worker
    assert first.status_code == 200
    assert second.status_code == 402
    assert second.headers["x-should-retry"] == "false"
    assert second.json()["error"]["type"] == "billing_error"
    assert "budget" in second.json()["error"]["message"]
    # (only the provider's free count of its input, which sized it, went upstream)
    sent = [r.path for r in eng.requests(project_id)]
    assert sent == ["/v1/messages", "/v1/messages/count_tokens"]
    assert stats.budget_exhausted
    # and the ledger charged the one call it let through, never passing the limit: what is
    # left could not pay a floor-sized answer (1,000 tokens: max_tokens, at $15 per million)
    assert project(project_id).spent_usd == Decimal("0.0174")  # 800 x $3 + 1,000 x $15 per million
    assert held_by_calls(project_id, lease) == 0


def test_the_turn_cap_refuses_the_next_call_after_max_turns_answered_ones(
    eng: Engine, gateway: Gateway
) -> None:
    # Given an iteration whose harness table caps it at two turns, and a model overloaded once
    toml = 'harness = "claude-code"\n[harnesses.claude-code]\nmax_turns = 2\n'
    script = {"responses": [{"error": {"status": 529}}, text("one"), text("two"), text("three")]}
    with lease_for(eng, gateway, toml, script) as (project_id, lease, _):
        # When the harness calls four times (the overloaded call is no turn)
        answers = [call(lease, project_id) for _ in range(4)]
        stats = lease.stats()
        # and once more, in the Responses API
        responses = call_responses(lease)

    # Then the call after the cap is refused in the API's own format, never sent upstream
    assert [a.status_code for a in answers] == [529, 200, 200, 402]
    assert answers[3].headers["x-should-retry"] == "false"
    assert "max_turns = 2" in answers[3].json()["error"]["message"]
    # and Claude Code's lease answers no Responses API at all
    assert responses.status_code == 404
    assert len(eng.requests(project_id)) == 3
    assert stats.max_turns_reached
    assert not stats.budget_exhausted
    assert stats.calls == 2
    assert held_by_calls(project_id, lease) == 0


def test_a_call_of_a_project_no_longer_running_is_refused_and_reserves_nothing(
    eng: Engine, gateway: Gateway
) -> None:
    with lease_for(eng, gateway) as (project_id, lease, _):
        # Given the project paused after the iteration started
        with session_scope() as session:
            session.get_one(Project, project_id).status = ProjectStatus.PAUSED
        held = project(project_id).reserved_usd  # what the coordinator reserved when it sent it
        # When its harness calls the model
        answer = call(lease, project_id)
        stats = lease.stats()

    # Then the call is refused, never sent, and reserves nothing more
    assert answer.status_code == 400
    assert "no longer running" in answer.json()["error"]["message"]
    assert stats.project_stopped
    assert eng.requests(project_id) == []
    assert project(project_id).reserved_usd == held


def call_responses(lease: GatewayLease) -> httpx.Response:
    body = {"model": "gpt-5.5", "input": "Go on.", "stream": True}
    with client(lease) as http:
        return http.post("/v1/responses", json=body, headers={"authorization": f"Bearer {lease.token}"})


def test_overloaded_answers_are_relayed_and_only_the_success_is_charged(
    eng: Engine, gateway: Gateway
) -> None:
    # Given a model that is overloaded three times before it answers
    overloaded = {"error": {"status": 529}, "repeat": 3}
    script = {"responses": [overloaded, text("at last", usage={"input_tokens": 10, "output_tokens": 5})]}
    with lease_for(eng, gateway, script=script) as (project_id, lease, _):
        # When the harness retries as harnesses do
        first_hold = project(project_id).reserved_usd
        answers = [call(lease, project_id) for _ in range(3)]
        held_after_failures = project(project_id).reserved_usd
        answers.append(call(lease, project_id))
        stats = lease.stats()

    # Then each 529 reached it as the model sent it, charged nothing, and the success once
    assert [a.status_code for a in answers] == [529, 529, 529, 200]
    assert answers[0].json()["error"]["type"] == "overloaded_error"
    # a failed call gives its reservation back at once: nothing held beyond the first hold
    assert held_after_failures <= first_hold
    assert [row.role for row in messages(project_id)] == ["user", "assistant"]
    assert stats.calls == 1
    assert project(project_id).spent_usd == Decimal("0.000105")  # 10 x $3 + 5 x $15 per million
    assert held_by_calls(project_id, lease) == 0


def test_the_relay_carries_a_stream_from_loopback_to_the_socket(eng: Engine, gateway: Gateway) -> None:
    # Given the relay script running as it runs in a container, in front of a lease's socket
    script = {"responses": [replay("basic_response.txt")], "when_exhausted": "repeat_last"}
    with lease_for(eng, gateway, script=script) as (project_id, lease, _), relay_on_host(lease) as url:
        # When a harness calls the loopback port
        body = message_body(project_id, max_tokens=100, messages=[{"role": "user", "content": "hi"}])
        with (
            httpx.Client(base_url=url) as http,
            http.stream("POST", "/v1/messages", json=body, headers={"x-api-key": lease.token}) as response,
        ):
            streamed = b"".join(response.iter_raw())

    # Then the stream arrives whole and the call is charged
    assert response.status_code == 200
    assert streamed == (STREAMS / "basic_response.txt").read_bytes()
    assert project(project_id).spent_usd == Decimal("0.000123")


def test_the_next_call_is_not_refused_for_what_the_last_one_only_reserved(
    eng: Engine, gateway: Gateway
) -> None:
    # Given a budget smaller than two calls' worst case (~$0.018 each), and calls that cost
    # almost nothing
    toml = "max_tokens = 1000\n[budget]\nlimit_usd = 0.031\n"
    cheap = text("cheap", usage={"input_tokens": 10, "output_tokens": 5})
    with lease_for(eng, gateway, toml, {"responses": [cheap], "when_exhausted": "repeat_last"}) as (
        project_id,
        lease,
        _,
    ):
        # When the harness calls again at once, the first call's record maybe not yet written
        answers = [call(lease, project_id) for _ in range(3)]
        stats = lease.stats()

    # Then each call goes: what the last one held but did not spend came back before the refusal
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert not stats.budget_exhausted
    assert stats.calls == 3
    assert [row.role for row in messages(project_id)] == ["user", "assistant"] * 3
    assert project(project_id).spent_usd == 3 * Decimal("0.000105")
    assert held_by_calls(project_id, lease) == 0
