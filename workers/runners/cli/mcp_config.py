"""How each agent CLI is told about the memory and message tools (issue #15 point 6): the
gateway's MCP server at ``/mcp`` on the lease's socket (:mod:`workers.gateway.mcp_tools`),
reached through the relay on loopback inside the container — none of the CLIs speaks HTTP MCP
over a unix socket — with the lease's token as the bearer. Each CLI names the server ``raas``,
so Claude Code and Codex offer ``mcp__raas__memory_write`` and OpenCode ``raas_memory_write``.

Offered only when the agent's category has ``coordination`` (the default); without it the CLI
is started as before, and the endpoint would list no tools anyway.
"""

from __future__ import annotations

import json
from typing import Any

from workers.claim import Claim
from workers.gateway.mcp_tools import MCP_PATH, SERVER_NAME


def offered(claim: Claim) -> bool:
    """Whether the agent gets the memory and message tools (its category's ``coordination``)."""
    return claim.config.category(claim.category).coordination


def url(relay_port: int) -> str:
    """The endpoint through the relay listening on ``relay_port`` (loopback in the container)."""
    return f"http://127.0.0.1:{relay_port}{MCP_PATH}"


def claude_code_args(token: str, relay_port: int) -> list[str]:
    """``--mcp-config`` with the server inline. The workspace's own ``.mcp.json`` still counts
    (no ``--strict-mcp-config``): settings files there stay the user's choice."""
    server = {"type": "http", "url": url(relay_port), "headers": {"Authorization": f"Bearer {token}"}}
    return ["--mcp-config", json.dumps({"mcpServers": {SERVER_NAME: server}})]


def codex_toml(relay_port: int, token_env: str) -> str:
    """The ``[mcp_servers.raas]`` table of Codex's config.toml: the token from its environment."""
    return f"""
[mcp_servers.{SERVER_NAME}]
url = "{url(relay_port)}"
bearer_token_env_var = "{token_env}"
"""


def opencode_entry(token: str, relay_port: int) -> dict[str, Any]:
    """OpenCode's ``mcp`` setting: a remote server."""
    server = {"type": "remote", "url": url(relay_port), "headers": {"Authorization": f"Bearer {token}"}}
    return {SERVER_NAME: {**server, "enabled": True}}
