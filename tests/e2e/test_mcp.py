"""The MCP tools end to end, through both transports, against a coordinator and a worker running
as separate processes (the scripted model behind them): ``raas mcp`` spawned over stdio by the
mcp SDK's client, and the coordinator's own /mcp over streamable HTTP. Each submits examples/hello,
follows it to completion from a cursor, and reads its cost.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from decimal import Decimal
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from tests.support.stack import RAAS, ROOT_DIR, Stack

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

HELLO = ROOT_DIR / "examples/hello"
TOKEN_BUDGET = 2000  # characters / 4 of the listing's JSON, as in tests/integration/test_mcp_http.py


@pytest.fixture(scope="module")
def stack(services: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("mcp")
    # The hello script once per project: both tests' projects run one after the other.
    script = json.loads((ROOT_DIR / "examples/scripts/hello.json").read_text())
    (tmp / "hello.json").write_text(json.dumps({**script, "when_exhausted": "cycle"}))
    running = Stack(log_dir=tmp / "logs", script=tmp / "hello.json").start()
    yield running
    running.stop()


@asynccontextmanager
async def over_stdio(stack: Stack) -> AsyncIterator[Client]:
    """``raas mcp`` as an MCP client starts it: a subprocess with the coordinator in its environment."""
    params = StdioServerParameters(command=RAAS[0], args=[*RAAS[1:], "mcp"], env=stack.env, cwd=ROOT_DIR)
    with (stack.log_dir / "mcp-stdio.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


@asynccontextmanager
async def over_http(stack: Stack) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {stack.env['RAAS_API_TOKEN']}"}
    url = stack.env["RAAS_COORDINATOR_URL"] + "/mcp"
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=90)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        yield client


def _answer(result: CallToolResult) -> Any:
    content = result.content[0]
    assert content.type == "text"
    assert not result.is_error, content.text
    return json.loads(content.text)


async def _follow_to_the_end(client: Client, project_id: str) -> list[dict[str, Any]]:
    """Every event, by calling follow_events from the cursor it returns until the project ended."""
    seen: list[dict[str, Any]] = []
    after = 0
    for _ in range(500):
        page = _answer(
            await client.call_tool(
                "follow_events", {"project_id": project_id, "after_seq": after, "wait_s": 5}
            )
        )
        seen += page["events"]
        after = page["next_after_seq"]
        if page["ended"] and not page["events"]:
            return seen
    pytest.fail(f"{project_id} did not end; last events {[e['type'] for e in seen[-5:]]}")


async def _run_hello(client: Client, submit_args: dict[str, Any], stack: Stack) -> None:
    # When examples/hello is submitted through the tools
    project = _answer(await client.call_tool("submit_project", submit_args))
    assert project["status"] == "running"
    assert project["name"] == "hello"  # from its raas.toml

    # Then following from cursor 0 sees every event once, in order, to its completion
    seen = await _follow_to_the_end(client, project["id"])
    assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1)), stack.logs()
    assert seen[0]["type"] == "project_created"
    assert seen[-1]["type"] == "project_completed", stack.logs()
    ran = [e for e in seen if e["type"] == "tool_executed" and e["data"]["tool"] == "bash"]
    assert "Hello, Constellation!" in ran[0]["data"]["output"]

    # And the status and the cost agree on what it spent: the scripted model's three calls
    status = _answer(await client.call_tool("project_status", {"project_id": project["id"]}))
    assert status["status"] == "completed"
    assert status["iterations_total"] == 1
    cost = _answer(await client.call_tool("project_cost", {"project_id": project["id"]}))
    assert Decimal(cost["total_usd"]) == Decimal(status["spent_usd"]) > 0
    assert [(line["key"], line["calls"]) for line in cost["by_model"]] == [("claude-sonnet-4-6", 3)]


def test_raas_mcp_over_stdio_submits_a_directory_and_follows_it_to_completion(stack: Stack) -> None:
    async def scenario() -> None:
        async with over_stdio(stack) as client:
            # Given the stdio server's tools: submit takes a directory on this machine
            tools = [
                t.model_dump(mode="json", by_alias=True, exclude_none=True)
                for t in (await client.list_tools()).tools
            ]
            assert "directory" in tools[0]["inputSchema"]["properties"]
            assert len(json.dumps(tools)) / 4 < TOKEN_BUDGET
            await _run_hello(client, {"directory": str(HELLO)}, stack)
            # And an error of the coordinator's comes back as the CLI's own line
            unknown = await client.call_tool("project_status", {"project_id": "nope"})
            assert unknown.is_error
            cli = stack.cli("status", "nope")
            assert cli.stderr == f"error: {unknown.content[0].text}\n"  # type: ignore[union-attr]

    anyio.run(scenario)


def test_the_coordinators_mcp_endpoint_submits_inline_files_and_follows_them_to_completion(
    stack: Stack,
) -> None:
    files = {p.relative_to(HELLO).as_posix(): p.read_text() for p in HELLO.rglob("*") if p.is_file()}

    async def scenario() -> None:
        async with over_http(stack) as client:
            await _run_hello(client, {"files": files}, stack)

    anyio.run(scenario)
