"""Codex: its command line (``exec --json`` on the Responses API, through the relay) and its
output lines, as the project's own events.

What it prints (0.169.0, see tests/fixtures/harnesses/codex): ``thread.started``,
``turn.started``, ``item.started`` / ``item.completed`` of an ``agent_message`` (its text), a
``command_execution`` (its shell: command, output, exit code), a ``file_change`` (its
``apply_patch``) or an ``error``, then ``turn.completed{usage}`` or ``turn.failed{error}``. It
reports no cost, and its usage is not read: the gateway meters every call.
"""

from __future__ import annotations

import re
from typing import Any

from shared.event_payloads import AgentOutputChunk, AgentToolCall, ToolExecuted
from shared.events import EventData
from shared.harnesses import HarnessConfig
from workers.claim import Claim
from workers.runners.cli import base, mcp_config
from workers.runners.cli.ending import RunEnd
from workers.runners.cli.tools import PREVIEW_CHARS, as_dict, json_line

_STATUS = re.compile(r"unexpected status (\d{3})")


def invocation(claim: Claim, config: HarnessConfig, token: str, places: base.Places) -> base.Invocation:
    """``codex exec --json`` on the Responses API through the relay. Codex has no turn cap of its
    own: the gateway's (:class:`workers.gateway.gate.Gate`) ends its iteration."""
    system, prompt = base.instructions(claim, places.workspace)
    toml = f"""model_provider = "raas"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.raas]
name = "raas"
base_url = "http://127.0.0.1:{places.relay_port}/v1"
wire_api = "responses"
env_key = "RAAS_MODEL_TOKEN"
request_max_retries = {base.MAX_RETRIES}
stream_max_retries = {base.MAX_RETRIES}
"""
    if mcp_config.offered(claim):
        toml += mcp_config.codex_toml(places.relay_port, "RAAS_MODEL_TOKEN")
    argv = [
        places.binary,
        "exec",
        "--json",
        "--skip-git-repo-check",
        "--disable",
        "plugins",
        # Its tools run in our sandbox: the container is the boundary (its own needs namespaces).
        "--dangerously-bypass-approvals-and-sandbox",
    ]
    if config.model:
        argv += ["--model", config.model]
    argv += [*config.args, f"{system}\n\n{prompt}"]
    relayed, relay_env = base.relayed(argv, places)
    env = {
        **base.quiet(places),
        **relay_env,
        # Codex refuses to make its helper links when CODEX_HOME is under /tmp.
        "CODEX_HOME": f"{places.home}/.codex",
        "RAAS_CODEX_CONFIG": toml,
        "RAAS_MODEL_TOKEN": token,
    }
    return base.Invocation(relayed, env)


class CodexParser:
    """Feed it stdout lines in order; it returns each line's events and keeps the run's end."""

    def __init__(self) -> None:
        self.end: RunEnd | None = None
        self._last_text = ""
        self._error: str | None = None
        self._turns = 0
        self._called: set[str] = set()

    def feed(self, line: str) -> list[EventData]:
        event = json_line(line)
        if event is None:
            return []  # not a JSON object (a warning the CLI printed): nothing to show
        kind = event.get("type")
        item = event.get("item") if isinstance(event.get("item"), dict) else None
        if kind == "turn.started":
            self._turns += 1
        elif kind in ("item.started", "item.completed") and item is not None:
            return self._item(item, done=kind == "item.completed")
        elif kind == "error":
            self._error = str(event.get("message") or "")[:1000] or None
        elif kind == "turn.completed":
            self.end = RunEnd(is_error=False, reason="completed", text=self._last_text, turns=self._turns)
        elif kind == "turn.failed":
            error = as_dict(event.get("error"))
            message = str(error.get("message") or self._error or "the turn failed")
            status = _STATUS.search(message)
            self.end = RunEnd(
                is_error=True,
                reason="api_error" if status else "error",
                text=self._last_text,
                error=message[:1000],
                api_status=int(status.group(1)) if status else None,
                turns=self._turns,
            )
        return []

    def _item(self, item: dict[str, Any], *, done: bool) -> list[EventData]:
        kind, item_id = item.get("type"), str(item.get("id", ""))
        if kind == "agent_message" and done and item.get("text"):
            self._last_text = str(item["text"])
            return [AgentOutputChunk(text=self._last_text)]
        if kind == "command_execution":
            return self._tool(item_id, "bash", {"command": item.get("command")}, item, done)
        if kind == "file_change":
            return self._tool(item_id, "edit", {"changes": item.get("changes")}, item, done)
        return []

    def _tool(
        self, item_id: str, tool: str, args: dict[str, Any], item: dict[str, Any], done: bool
    ) -> list[EventData]:
        out: list[EventData] = []
        if item_id not in self._called:  # a completed item may come without its started one
            self._called.add(item_id)
            out.append(AgentToolCall(tool=tool, input=args, tool_use_id=item_id))
        if done:
            exit_code = item.get("exit_code")
            failed = item.get("status") == "failed" or (isinstance(exit_code, int) and exit_code != 0)
            output = item.get("aggregated_output")
            if output is None:
                output = ", ".join(f"{c.get('kind')} {c.get('path')}" for c in item.get("changes") or [])
            out.append(
                ToolExecuted(
                    tool=tool,
                    tool_use_id=item_id,
                    command=item.get("command") if tool == "bash" else None,
                    exit_code=exit_code if isinstance(exit_code, int) else None,
                    is_error=failed,
                    output=str(output)[:PREVIEW_CHARS],
                )
            )
        return out


CLI = base.Cli("codex", invocation, CodexParser, relayed=True)
