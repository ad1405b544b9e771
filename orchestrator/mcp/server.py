"""The MCP server: the tools on the SDK's low-level ``Server``, over stdio or streamable HTTP.

Why the low-level ``Server`` (``mcp.server.lowlevel``) and not ``MCPServer`` (the 2.x name of
FastMCP): MCPServer derives each tool's schema from a function signature and answers bad
arguments with pydantic's multi-line report prefixed by its own words; here the schemas come
from our argument models and every error is our one line (``orchestrator.mcp.tools``). Listing
and calling tools is all the protocol this server needs.

Which backend a call uses is decided per call: ``raas mcp`` (stdio) has one for the process;
the coordinator's /mcp endpoint (``orchestrator.api.mcp_http``) authenticates each request and
puts the caller's own backend into the request's ASGI scope under :data:`BACKEND_SCOPE_KEY`.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import anyio
from mcp import types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from orchestrator.mcp.backends import Backend
from orchestrator.mcp.tools import call, tools_for

NAME = "constellation"
BACKEND_SCOPE_KEY = "raas.mcp.backend"

BackendFor = Callable[[ServerRequestContext[Any, Any]], Backend]


def build_server(backend_for: BackendFor) -> Server[Any]:
    """The MCP server whose tools act through ``backend_for(the request's context)``."""

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        tools = tools_for(backend_for(ctx).reads_local_directories).values()
        listed = [
            types.Tool(name=t.name, description=t.description, input_schema=t.input_schema()) for t in tools
        ]
        return types.ListToolsResult(tools=listed)

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        backend = backend_for(ctx)
        tools = tools_for(backend.reads_local_directories)
        # The core and the HTTP client block; a follow waits up to its wait_s. A thread each.
        text, failed = await anyio.to_thread.run_sync(
            call, tools, backend, params.name, params.arguments or {}
        )
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=failed)

    return Server(
        NAME, version=version("constellation-raas"), on_list_tools=list_tools, on_call_tool=call_tool
    )


async def serve_stdio(backend: Backend) -> None:
    """Serve the tools on this process's stdin and stdout until the client closes them."""
    server = build_server(lambda _ctx: backend)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def backend_in_scope(ctx: ServerRequestContext[Any, Any]) -> Backend:
    """The backend the HTTP endpoint put into this request's scope (the authenticated caller's)."""
    if ctx.request is None:
        msg = "an MCP request without its HTTP request: served outside the /mcp endpoint"
        raise RuntimeError(msg)
    backend: Backend = ctx.request.scope[BACKEND_SCOPE_KEY]
    return backend


def http_session_manager() -> StreamableHTTPSessionManager:
    """The streamable-HTTP transport of the tools, for an endpoint that authenticates first.

    Stateless, with JSON answers: each POST is one exchange, checked on its own by the endpoint,
    and no session outlives it (nor is bound to a token that could change hands). The SDK's own
    Host/Origin check stays off: the endpoint checks the Origin against the coordinator's list,
    and the SDK's Host list would refuse every name the coordinator is reached by but loopback.
    """
    return StreamableHTTPSessionManager(
        app=build_server(backend_in_scope),
        json_response=True,
        stateless=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
