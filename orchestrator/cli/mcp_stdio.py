"""``raas mcp``: the MCP tools over stdio, for an MCP client on this machine.

The client (Claude Code, an IDE) starts it as a subprocess; it reaches the coordinator at
RAAS_COORDINATOR_URL with RAAS_API_TOKEN, as every other command does, and may submit a project
from a directory on this machine. stdout carries the protocol alone: nothing else may print.
"""

from __future__ import annotations

import anyio

from orchestrator.cli import SERVICES, api, app


@app.command("mcp", rich_help_panel=SERVICES)
def mcp_stdio() -> None:
    """Serve the MCP tools on stdin/stdout for an MCP client: submit, follow, control, cost, memory."""
    from orchestrator.mcp.backends import HttpBackend
    from orchestrator.mcp.server import serve_stdio

    client = api()
    try:
        anyio.run(serve_stdio, HttpBackend(client))
    finally:
        client.close()
