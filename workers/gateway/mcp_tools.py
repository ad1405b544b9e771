"""The memory bank and messages as an MCP server on each lease's socket (``/mcp``), for the agent
CLIs (issue #15 point 6): Claude Code, Codex and OpenCode reach it from inside the container the
way they reach the model — through the lease's socket (Claude Code and the others over the
in-container relay) with the lease's token, so every call is scoped to the iteration's project
and agent, and ends when the lease is revoked.

The tools are :mod:`workers.tools.coordination`'s, the api harness's: the same argument models
(their published schemas), limits and error results, and the same events, published after the
commit. A category with ``coordination = false`` lists no tools and every call is refused.

Transport: the SDK's streamable HTTP in stateless mode with JSON answers — each POST is one
exchange checked on its own (the token, by the lease's connection), and no MCP session outlives
a request. The lease's h11 connection hands the request to the SDK as an ASGI call
(:meth:`McpEndpoint.handle`) with the lease's gate in its scope.

A write or a send is keyed, as in the api harness, by (iteration, tool_use id), so that a
redelivered iteration whose model asks the same call again writes once. The tool_use id is the
model's own: Claude Code sends it with each call (``_meta["claudecode/toolUseId"]``); for the
others, the lease's last model answer is searched for the call with this tool's name and these
arguments (:meth:`~workers.gateway.gate.Gate.tool_use_id`). Only when neither finds it (a client
that calls on its own) does the key fall back to ``mcp-<attempt>-<JSON-RPC id>``: unique within
an attempt (the client numbers its requests), and an attempt of its own so that a client
numbering from zero again in a redelivered attempt is not mistaken for the first attempt's call
with other arguments — such a call, which no model answer names, may then be written again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, MutableMapping
from concurrent.futures import Executor
from importlib.metadata import version
from typing import Any

from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from shared.memory import ToolCall
from shared.schemas import EventOut
from workers.gateway.gate import Gate
from workers.tools.coordination import COORDINATION_TOOLS, Caller, answer

MCP_PATH = "/mcp"
SERVER_NAME = "raas"  # Claude Code names the tools mcp__raas__memory_write and so on
GATE_SCOPE_KEY = "raas.gateway.gate"
CLAUDE_CODE_TOOL_USE_ID = "claudecode/toolUseId"

Publish = Callable[[EventOut], None]


def _gate(ctx: ServerRequestContext[Any, Any]) -> Gate:
    """The gate of the lease the request came through (its claim: project, agent, iteration)."""
    if ctx.request is None:
        msg = "an MCP request without its HTTP request: served outside a gateway lease"
        raise RuntimeError(msg)
    gate: Gate = ctx.request.scope[GATE_SCOPE_KEY]
    return gate


def coordination_on(gate: Gate) -> bool:
    """Whether the lease's agent has the memory and message tools (its category's ``coordination``)."""
    claim = gate.claim
    return claim.config.category(claim.category).coordination


def _tool_use_id(gate: Gate, ctx: ServerRequestContext[Any, Any], name: str, args: Any) -> str:
    """The key of this call's write: see the module's docstring."""
    meta = ctx.meta or {}
    given = meta.get(CLAUDE_CODE_TOOL_USE_ID) if isinstance(meta, dict) else None
    if isinstance(given, str) and given:
        return given
    found = gate.tool_use_id(name, args)
    if found is not None:
        return found
    return f"mcp-{gate.claim.attempt}-{ctx.request_id}"


def _call(
    gate: Gate, publish: Publish | None, ctx: ServerRequestContext[Any, Any], name: str, args: Any
) -> tuple[str, bool]:
    """Run the tool in its transaction and publish its event after the commit (blocking)."""
    claim = gate.claim
    call = ToolCall(claim.project_id, claim.agent_id, claim.iteration_id, _tool_use_id(gate, ctx, name, args))
    outcome = answer(Caller(call, claim.memory_bank, claim.config.memory), name, args)
    if outcome.event is not None and publish is not None:
        publish(outcome.event)
    return outcome.result.content, outcome.result.is_error


def build_server(blocking: Executor, publish: Publish | None) -> Server[Any]:
    """The MCP server of the coordination tools; each request's lease's gate is in its HTTP scope.
    Calls run on ``blocking`` (the database blocks); their events go to ``publish``."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        if not coordination_on(_gate(ctx)):
            return types.ListToolsResult(tools=[])
        listed = []
        for tool in COORDINATION_TOOLS.values():
            spec = tool.spec()
            listed.append(
                types.Tool(
                    name=spec["name"], description=spec["description"], input_schema=spec["input_schema"]
                )
            )
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        gate = _gate(ctx)
        name, args = params.name, params.arguments if params.arguments is not None else {}
        if not coordination_on(gate):
            text, failed = f"{name}: this agent's category has no memory or message tools", True
        elif name not in COORDINATION_TOOLS:
            text, failed = f"unknown tool {name!r}; known: {', '.join(COORDINATION_TOOLS)}", True
        else:
            # The database blocks (and the key may wait for the last answer to be read): the
            # gateway's pool of blocking threads, as its model calls.
            loop = asyncio.get_running_loop()
            text, failed = await loop.run_in_executor(blocking, _call, gate, publish, ctx, name, args)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=failed)

    return Server(
        SERVER_NAME, version=version("constellation-raas"), on_list_tools=list_tools, on_call_tool=call_tool
    )


class McpEndpoint:
    """The SDK's streamable-HTTP manager, run on the gateway's event loop for all its leases."""

    def __init__(self, blocking: Executor, publish: Publish | None) -> None:
        # The SDK's Host/Origin check stays off: only the lease's socket reaches this, with its token.
        self._manager = StreamableHTTPSessionManager(
            app=build_server(blocking, publish),
            json_response=True,
            stateless=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        started = asyncio.Event()
        self._stop = asyncio.Event()

        async def hold() -> None:
            assert self._stop is not None
            async with self._manager.run():
                started.set()
                await self._stop.wait()

        self._task = asyncio.create_task(hold(), name="gateway-mcp")
        await started.wait()

    async def stop(self) -> None:
        if self._stop is None or self._task is None:
            return
        self._stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def handle(
        self, gate: Gate, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One HTTP exchange through the SDK: (status, headers, body), the answer whole."""
        path, _, query = target.partition("?")
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": query.encode(),
            "root_path": "",
            "headers": [(name.lower(), value) for name, value in headers],
            "client": None,
            "server": ("localhost", 80),
            GATE_SCOPE_KEY: gate,
        }
        sent_body = False
        gone = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await gone.wait()
            return {"type": "http.disconnect"}

        status = 500
        out_headers: list[tuple[str, str]] = []
        chunks: list[bytes] = []

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                out_headers.extend(
                    (k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", [])
                )
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        try:
            await self._manager.handle_request(scope, receive, send)
        finally:
            gone.set()
        return status, out_headers, b"".join(chunks)
