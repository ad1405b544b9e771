"""The memory bank and messages as an MCP server at ``/mcp`` on a gateway lease's socket (issue
#15 point 6), reached as a harness reaches it from its container: through ``relay.py`` on
loopback, with the lease's token. A real MCP client (the SDK's) and the real Claude Code binary
call the tools; what they write is in the database with its writer and its event, once.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from pydantic import SecretStr

from shared.db import session_scope
from shared.memory import entries
from shared.schemas import EventOut
from tests.support.claude_host import CLAUDE, CLAUDE_MISSING, run_claude_on_host
from tests.support.engine import Engine, engine
from tests.support.records import event_log, text, tool
from tests.support.relay import relay_on_host
from workers.claim import Claim, claim_iteration
from workers.gateway import Gateway, GatewayLease
from workers.scripted_model.script import Script

pytestmark = [pytest.mark.integration]

DONE = {"responses": [text("done")], "when_exhausted": "repeat_last"}


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(DONE, tmp_path) as running:
        yield running


@pytest.fixture
def published() -> list[EventOut]:
    return []


@pytest.fixture
def gateway(eng: Engine, published: list[EventOut]) -> Iterator[Gateway]:
    settings = eng.settings.model_copy(
        update={"anthropic_api_key": SecretStr("sk-ant-real-key-of-the-worker")}
    )
    made = Gateway(settings, limiter=None, publish=published.append)
    yield made
    made.close()


@contextmanager
def leased(eng: Engine, gateway: Gateway, raas_toml: str = "") -> Iterator[tuple[Claim, GatewayLease]]:
    project_id = eng.submit(raas_toml=raas_toml)
    iteration_id = eng.dispatcher.take(project_id)
    assert iteration_id is not None
    claim = claim_iteration(iteration_id, "gateway-mcp-test", stale_after_s=30)
    assert claim is not None
    with gateway.open(claim, lambda event: None) as lease:
        yield claim, lease


@contextmanager
def relay(lease: GatewayLease) -> Iterator[str]:
    """relay.py on the host, as the runner starts it in the container: the URL of /mcp through it."""
    with relay_on_host(lease) as base_url:
        yield f"{base_url}/mcp"


def mcp_session(url: str, token: str, steps: Any) -> Any:
    """Run ``steps(client)`` on the SDK's MCP client at ``url`` with ``token`` as its bearer."""

    async def main() -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30)) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return await steps(client)

    return anyio.run(main)


def bank(claim: Claim) -> dict[str, Any]:
    with session_scope() as session:
        return {entry.key: entry for entry in entries(session, claim.memory_bank)}


def test_an_mcp_client_lists_the_coordination_tools_and_its_write_is_stored_once_with_its_writer(
    eng: Engine, gateway: Gateway, published: list[EventOut]
) -> None:
    # Given a lease for a claimed iteration, reached through the relay as from a container
    with leased(eng, gateway) as (claim, lease), relay(lease) as url:
        # When a real MCP client lists the tools and writes the same call twice (a redelivery)
        args = {"key": "build/cmd", "value": "make test", "tags": ["build"]}

        async def steps(session: Any) -> tuple[list[str], types.CallToolResult, types.CallToolResult]:
            listed = await session.list_tools()
            first = await session.call_tool("memory_write", args, meta={"claudecode/toolUseId": "toolu_A"})
            again = await session.call_tool("memory_write", args, meta={"claudecode/toolUseId": "toolu_A"})
            return [t.name for t in listed.tools], first, again

        names, first, again = mcp_session(url, lease.token, steps)

    # Then the api harness's four tools are listed, the write answered, stored once with its writer
    assert names == ["memory_write", "memory_read", "memory_search", "send_message"]
    assert not first.is_error
    assert "Wrote 'build/cmd' (version 1)" in first.content[0].text
    assert "(version 1)" in again.content[0].text
    entry = bank(claim)["build/cmd"]
    assert entry.version == 1
    (value,) = entry.values
    assert (value.value, value.tags, value.agent_id, value.iteration) == (
        "make test",
        ["build"],
        claim.agent_id,
        1,
    )
    # and one memory_written event, recorded and published
    written = event_log(claim.project_id, "memory_written")
    assert len(written) == 1
    assert [e.type for e in published] == ["memory_written"]


def test_bad_arguments_and_limits_are_tool_errors_naming_the_argument_and_nothing_is_stored(
    eng: Engine, gateway: Gateway
) -> None:
    toml = "[memory]\nmax_entry_bytes = 20\n"
    with leased(eng, gateway, toml) as (claim, lease), relay(lease) as url:

        async def steps(session: Any) -> list[types.CallToolResult]:
            return [
                await session.call_tool("memory_write", {"key": "", "value": "x"}),
                await session.call_tool("memory_write", {"key": "k", "value": "x" * 21}),
                await session.call_tool("send_message", {"to": "nobody-here", "text": "hi"}),
                await session.call_tool("memory_search", {"query": 5}),
            ]

        results = mcp_session(url, lease.token, steps)

    assert all(r.is_error for r in results), results
    texts = [r.content[0].text for r in results]
    assert texts[0].startswith("memory_write: argument 'key'")
    assert "20" in texts[1]
    assert texts[2].startswith("send_message: ")
    assert texts[3].startswith("memory_search: argument 'query'")
    assert bank(claim) == {}
    assert event_log(claim.project_id, "memory_written") == []
    assert event_log(claim.project_id, "message_sent") == []


def test_a_category_without_coordination_gets_no_tools_and_a_wrong_token_is_refused(
    eng: Engine, gateway: Gateway
) -> None:
    toml = "[categories.builder]\ncoordination = false\n"
    with leased(eng, gateway, toml) as (claim, lease), relay(lease) as url:

        async def steps(session: Any) -> tuple[list[types.Tool], types.CallToolResult]:
            listed = await session.list_tools()
            return listed.tools, await session.call_tool("memory_write", {"key": "k", "value": "v"})

        tools, refused = mcp_session(url, lease.token, steps)
        wrong = httpx.post(url, json={}, headers={"Authorization": "Bearer raas-gw-not-this-one"})

    assert tools == []
    assert refused.is_error
    assert "no memory or message tools" in refused.content[0].text
    assert bank(claim) == {}
    assert wrong.status_code == 401


def run_claude(url: str, token: str, lease: GatewayLease, home: Path) -> subprocess.CompletedProcess[str]:
    """Claude Code on the host, its model and its MCP server both through the lease."""
    config = {
        "mcpServers": {"raas": {"type": "http", "url": url, "headers": {"Authorization": f"Bearer {token}"}}}
    }
    mcp = ["--mcp-config", json.dumps(config), "--strict-mcp-config", "--dangerously-skip-permissions"]
    return run_claude_on_host(lease, home, "Note the build command.", max_turns=3, extra=mcp)


def test_claude_code_calls_memory_write_through_mcp_and_the_entry_is_in_the_database(
    eng: Engine, gateway: Gateway, published: list[EventOut], tmp_path: Path
) -> None:
    if not CLAUDE.exists():
        pytest.fail(CLAUDE_MISSING)
    # Given a model whose first answer calls the memory tool as Claude Code names it
    args = {"key": "build/cmd", "value": "make test", "tags": ["build"]}
    script = {
        "responses": [tool("mcp__raas__memory_write", args, use_id="toolu_mcp_1"), text("Noted.")],
        "when_exhausted": "repeat_last",
    }
    eng.model.reset(Script.model_validate(script))
    with leased(eng, gateway) as (claim, lease), relay(lease) as url:
        # When Claude Code runs with the lease's /mcp as its MCP server "raas"
        done = run_claude(url, lease.token, lease, tmp_path / "home")

    # Then the call ran (not denied), and the entry is in the database with its writer, once
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, done.stderr[-2000:]
    results = [
        block
        for line in lines
        if line.get("type") == "user"
        for block in line["message"]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    assert len(results) == 1, lines
    assert not results[0].get("is_error"), results[0]
    entry = bank(claim)["build/cmd"]
    (value,) = entry.values
    assert (value.value, value.agent_id, value.iteration) == ("make test", claim.agent_id, 1)
    # keyed by the model's own tool_use id, with its event recorded and published
    written = event_log(claim.project_id, "memory_written")
    assert len(written) == 1
    assert written[0].data["tool_use_id"] == "toolu_mcp_1"
    assert [e.type for e in published] == ["memory_written"]
