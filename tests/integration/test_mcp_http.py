"""The coordinator's /mcp endpoint, spoken to by the mcp SDK's own client over streamable HTTP:
the API's tokens and tenant rules hold for the tools, a foreign Origin is refused, bad arguments
and core errors come back as one-line tool errors, and the tool listing stays small.

(tests/e2e/test_mcp.py runs projects to completion through both transports.)
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from cryptography.fernet import Fernet
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult
from pydantic import SecretStr
from sqlalchemy import func, select

from orchestrator.api.tenants import create_tenant
from shared.db import session_scope
from shared.models import Project, ProjectStatus
from tests.support.engine import Engine, engine
from tests.support.stack import RAAS, ROOT_DIR

pytestmark = [pytest.mark.integration, pytest.mark.docker]

IDLE = {"responses": [{"content": [{"type": "text", "text": "idle"}]}], "when_exhausted": "repeat_last"}
ALLOWED_ORIGIN = "https://tools.example"
#: The tools' listing costs at most this many tokens, counted as characters / 4 of its JSON
#: (a tokenizer-free rule of thumb for English and JSON; real tokenizers come out near it).
TOKEN_BUDGET = 2000
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    },
}


@pytest.fixture
def eng(services: dict[str, str], tmp_path: Path) -> Iterator[Engine]:
    with engine(IDLE, tmp_path, mcp_allowed_origins=[ALLOWED_ORIGIN]) as running:
        yield running


@asynccontextmanager
async def mcp_session(eng: Engine, token: str) -> AsyncIterator[Client]:
    """The SDK's client on /mcp, sending ``token`` as the API's bearer token."""
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=90)) as http,
        Client(streamable_http_client(f"{eng.settings.coordinator_url}/mcp", http_client=http)) as client,
    ):
        yield client


def _projects() -> int:
    with session_scope() as session:
        return session.scalar(select(func.count()).select_from(Project)) or 0


def _text(result: CallToolResult) -> str:
    content = result.content[0]
    assert content.type == "text"
    return content.text


def _answer(result: CallToolResult) -> Any:
    assert not result.is_error, _text(result)
    return json.loads(_text(result))


def _error(result: CallToolResult) -> str:
    assert result.is_error, _text(result)
    return _text(result)


PROJECT = {"PROMPT.md": "Do it.\n", "raas.toml": "", "notes/plan.md": "- one\n"}


def test_a_tenant_sees_only_its_own_projects_through_the_tools(eng: Engine) -> None:
    _, token_a = create_tenant(f"mcp-alpha-{eng.tmp.name}")
    _, token_b = create_tenant(f"mcp-beta-{eng.tmp.name}")

    async def scenario() -> None:
        # Given a project tenant alpha submitted through its tools
        async with mcp_session(eng, token_a) as alpha:
            mine = _answer(await alpha.call_tool("submit_project", {"files": PROJECT, "name": "mine"}))
            assert mine["status"] == "running"
            assert (
                _answer(await alpha.call_tool("project_status", {"project_id": mine["id"]}))["name"] == "mine"
            )
        # When tenant beta names it in every tool
        async with mcp_session(eng, token_b) as beta:
            unknown = _error(await beta.call_tool("project_status", {"project_id": "doesnotexist"}))
            for name, extra in (
                ("project_status", {}),
                ("follow_events", {"wait_s": 0}),
                ("project_cost", {}),
                ("control_project", {"action": "stop"}),
                ("decide_approval", {}),
            ):
                refused = _error(await beta.call_tool(name, {"project_id": mine["id"], **extra}))
                # Then each answers as for an id nobody has: the CLI's one-line message
                assert refused == unknown.replace("doesnotexist", mine["id"]), name
        assert unknown == "no project 'doesnotexist'; `raas ls` lists your projects"
        # And the cluster's token sees it, still running (beta's stop did nothing)
        async with mcp_session(eng, eng.settings.api_token.get_secret_value()) as cluster:
            seen = _answer(await cluster.call_tool("project_status", {"project_id": mine["id"]}))
            assert seen["status"] == "running"

    anyio.run(scenario)


def test_a_wrong_token_is_refused_before_any_tool_runs(eng: Engine) -> None:
    before = _projects()
    url = f"{eng.settings.coordinator_url}/mcp"
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "submit_project", "arguments": {"files": PROJECT}},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=20) as http:
        for token in ("wrong", eng.settings.api_token.get_secret_value() + "x", ""):
            auth = {"Authorization": f"Bearer {token}"} if token else {}
            for body in (INITIALIZE, call):
                refused = http.post(url, json=body, headers={**headers, **auth})
                assert refused.status_code == 401
                assert "API token" in refused.json()["detail"]
                assert refused.headers["www-authenticate"] == "Bearer"

    async def with_the_sdk() -> None:
        async with mcp_session(eng, "wrong") as client:
            await client.list_tools()

    # The SDK's client cannot even connect with it
    with pytest.raises(ExceptionGroup) as failed:
        anyio.run(with_the_sdk)
    assert failed.group_contains(MCPError)
    assert _projects() == before


def test_a_browser_origin_not_on_the_list_is_refused(eng: Engine) -> None:
    url = f"{eng.settings.coordinator_url}/mcp"
    token = eng.settings.api_token.get_secret_value()
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    with httpx.Client(timeout=20) as http:
        # A page elsewhere (a DNS-rebinding one: its origin is its own name) is refused, token or not
        for origin in ("http://evil.example", "http://127.0.0.1.evil.example:8700", "null"):
            refused = http.post(url, json=INITIALIZE, headers={**headers, "Origin": origin})
            assert refused.status_code == 403, origin
            assert "RAAS_MCP_ALLOWED_ORIGINS" in refused.json()["detail"]
        # An origin on the list, and a client that sends none (not a browser), are served
        for extra in ({"Origin": ALLOWED_ORIGIN}, {}):
            served = http.post(url, json=INITIALIZE, headers={**headers, **extra})
            assert served.status_code == 200, served.text
            assert served.json()["result"]["serverInfo"]["name"] == "constellation"


def test_bad_arguments_come_back_as_a_tool_error_naming_the_argument(eng: Engine) -> None:
    async def scenario() -> None:
        async with mcp_session(eng, eng.settings.api_token.get_secret_value()) as client:
            wrong_seq = _error(await client.call_tool("follow_events", {"project_id": "p", "after_seq": -1}))
            assert wrong_seq.startswith("invalid arguments for follow_events: after_seq: ")
            too_long = _error(await client.call_tool("follow_events", {"project_id": "p", "wait_s": 3600}))
            assert "wait_s: Input should be less than or equal to 60" in too_long
            action = _error(
                await client.call_tool("control_project", {"project_id": "p", "action": "delete"})
            )
            assert "action: Input should be 'pause', 'resume' or 'stop'" in action
            missing = _error(await client.call_tool("project_cost", {}))
            assert missing == "invalid arguments for project_cost: project_id: Field required"
            # A directory is for the stdio server on the user's machine, not the coordinator's disk
            local = _error(await client.call_tool("submit_project", {"directory": "/etc"}))
            assert "directory: Extra inputs are not permitted" in local
            no_prompt = _error(await client.call_tool("submit_project", {"files": {"raas.toml": ""}}))
            assert "PROMPT.md" in no_prompt
            assert "\n" not in no_prompt

    before = _projects()
    anyio.run(scenario)
    assert _projects() == before


def test_the_tools_listing_costs_under_two_thousand_tokens(eng: Engine) -> None:
    async def listing() -> list[dict[str, Any]]:
        async with mcp_session(eng, eng.settings.api_token.get_secret_value()) as client:
            tools = (await client.list_tools()).tools
        return [tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in tools]

    tools = anyio.run(listing)
    names = [tool["name"] for tool in tools]
    assert names == [
        "submit_project",
        "project_status",
        "follow_events",
        "control_project",
        "project_cost",
        "search_memory",
        "decide_approval",
        "say_to_agent",
        "list_triggers",
        "control_trigger",
        "list_notifications",
    ]
    assert len(json.dumps(tools)) / 4 < TOKEN_BUDGET
    submit = tools[0]["inputSchema"]["properties"]
    assert set(submit) == {"files", "name"}  # no directory: the coordinator reads no local paths


MEMORY = {
    "responses": [
        {
            "content": [
                {
                    "type": "tool_use",
                    "name": "memory_write",
                    "input": {
                        "key": "decisions/ledger",
                        "value": "The ledger lives in Postgres.",
                        "tags": ["arch"],
                    },
                }
            ]
        },
        {"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "noted"}}]},
    ],
    "when_exhausted": "repeat_last",
}


@asynccontextmanager
async def raas_mcp(eng: Engine, token: str) -> AsyncIterator[Client]:
    """``raas mcp`` spawned over stdio, pointed at the engine's coordinator API with ``token``."""
    env = {"RAAS_COORDINATOR_URL": eng.settings.coordinator_url, "RAAS_API_TOKEN": token}
    params = StdioServerParameters(command=RAAS[0], args=[*RAAS[1:], "mcp"], env=env, cwd=ROOT_DIR)
    with (eng.tmp / "mcp-stdio.log").open("w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            yield client


def test_search_memory_finds_what_an_agent_wrote_through_both_transports(
    services: dict[str, str], tmp_path: Path
) -> None:
    with engine(MEMORY, tmp_path) as eng:
        _, token = create_tenant(f"mcp-memory-{tmp_path.name}")
        _, stranger = create_tenant(f"mcp-stranger-{tmp_path.name}")

        async def submit() -> str:
            async with mcp_session(eng, token) as client:
                project = _answer(await client.call_tool("submit_project", {"files": PROJECT}))
            return str(project["id"])

        # Given an agent of a tenant's project that wrote a note into its memory bank
        project_id = anyio.run(submit)
        eng.run_to_end(project_id)

        async def search() -> None:
            query = {"project_id": project_id, "query": "ledger postgres"}
            # When the tenant searches it, over HTTP (in-process) and over stdio (the API)
            async with mcp_session(eng, token) as http, raas_mcp(eng, token) as stdio:
                for client in (http, stdio):
                    found = _answer(await client.call_tool("search_memory", query))["entries"]
                    # Then the note is found, with its value
                    assert [e["key"] for e in found] == ["decisions/ledger"]
                    assert found[0]["values"][0]["value"] == "The ledger lives in Postgres."
                    nothing = _answer(
                        await client.call_tool("search_memory", {**query, "query": "kubernetes"})
                    )
                    assert nothing == {"entries": []}
            # And another tenant's search answers as for an unknown project
            async with mcp_session(eng, stranger) as other:
                refused = _error(await other.call_tool("search_memory", query))
                assert refused == f"no project {project_id!r}; `raas ls` lists your projects"

        anyio.run(search)


def test_decide_approval_approves_once_through_both_transports(
    services: dict[str, str], tmp_path: Path
) -> None:
    complete = {"content": [{"type": "tool_use", "name": "task_complete", "input": {"summary": "done"}}]}
    with engine({"responses": [complete]}, tmp_path) as eng:
        _, token = create_tenant(f"mcp-approve-{tmp_path.name}")
        _, stranger = create_tenant(f"mcp-approve-other-{tmp_path.name}")
        files = {**PROJECT, "raas.toml": "[approvals]\ndiff = true\n"}

        async def submit() -> str:
            async with mcp_session(eng, token) as client:
                project = _answer(await client.call_tool("submit_project", {"files": files}))
            return str(project["id"])

        # Given a tenant's project whose finished work waits for approval
        project_id = anyio.run(submit)
        eng.run_to_end(project_id)

        async def decide() -> None:
            args = {"project_id": project_id, "comment": "ship it"}
            async with mcp_session(eng, token) as http, raas_mcp(eng, token) as stdio:
                status = _answer(await http.call_tool("project_status", {"project_id": project_id}))
                assert status["status"] == "waiting_for_approval"
                # When another tenant decides it, it answers as for an unknown project
                async with mcp_session(eng, stranger) as other:
                    refused = _error(await other.call_tool("decide_approval", args))
                    assert refused == f"no project {project_id!r}; `raas ls` lists your projects"
                # When the tenant approves it over stdio (the API), then again in-process
                decided = _answer(await stdio.call_tool("decide_approval", args))
                again = _error(await http.call_tool("decide_approval", {"project_id": project_id}))
            # Then the first approved it, the second was told so, and the project completed
            assert (decided["status"], decided["comment"]) == ("approved", "ship it")
            assert f"diff#1 was approved by {decided['decided_by']}" in again
            assert decided["decided_by"].startswith("token:")

        anyio.run(decide)
        with session_scope() as session:
            assert session.get_one(Project, project_id).status == ProjectStatus.COMPLETED


PAUSE = {"trigger": "alerts", "action": "pause"}


def test_a_tenant_lists_and_pauses_its_triggers_and_lists_its_notifications_through_both_transports(
    services: dict[str, str], tmp_path: Path
) -> None:
    key = SecretStr(Fernet.generate_key().decode())
    with engine(IDLE, tmp_path, secret_key=key) as eng:
        _, token = create_tenant(f"mcp-triggers-{tmp_path.name}")
        _, stranger = create_tenant(f"mcp-triggers-other-{tmp_path.name}")
        # Given a tenant's generic-hook trigger and webhook subscription, made over the API
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=eng.settings.coordinator_url, headers=auth, timeout=20) as api:
            hook = {
                "name": "alerts",
                "source": "webhook",
                "secret": "s" * 32,
                "template": {"prompt": "Go.\n"},
            }
            trigger = api.post("/v1/triggers", json=hook).json()
            target = {"medium": "webhook", "target": "https://hooks.example/raas", "secret": "k" * 32}
            assert api.post("/v1/notifications", json=target).status_code == 201

        async def scenario() -> None:
            async with mcp_session(eng, token) as http, raas_mcp(eng, token) as stdio:
                for client in (http, stdio):
                    # When the tenant lists them, through either transport
                    (listed,) = _answer(await client.call_tool("list_triggers", {}))["triggers"]
                    assert (listed["name"], listed["status"]) == ("alerts", "active")
                    assert listed["hook_path"] == f"/v1/hooks/{trigger['id']}"
                    assert "spec" not in listed  # a listing stays short; one trigger has it
                    one = _answer(await client.call_tool("list_triggers", {"trigger": "alerts"}))
                    assert (one["spec"]["template"]["prompt"], one["runs"]) == ("Go.\n", [])
                    (sub,) = _answer(await client.call_tool("list_notifications", {}))["subscriptions"]
                    assert (sub["target"], sub["state"]) == ("https://hooks.example/raas", "active")
                    assert "k" * 32 not in json.dumps(sub)
                # and pauses it in-process, resumes it over stdio (the API)
                paused = _answer(
                    await http.call_tool("control_trigger", {"trigger": "alerts", "action": "pause"})
                )
                assert paused["status"] == "paused"
                resumed = _answer(
                    await stdio.call_tool("control_trigger", {"trigger": trigger["id"], "action": "resume"})
                )
                assert resumed["status"] == "active"
            # Then another tenant sees none of them and cannot pause it
            async with mcp_session(eng, stranger) as other:
                assert _answer(await other.call_tool("list_triggers", {})) == {"triggers": []}
                assert _answer(await other.call_tool("list_notifications", {})) == {"subscriptions": []}
                refused = _error(
                    await other.call_tool("control_trigger", {"trigger": "alerts", "action": "pause"})
                )
                assert refused == "no trigger 'alerts'; `raas trigger ls` lists yours"

        anyio.run(scenario)
