"""OpenCode: its command line (``run --format json`` on the Anthropic API, through the relay)
and its output lines, as the project's own events.

What it prints (1.18.33, see tests/fixtures/harnesses/opencode): per model call a
``step_start``, its ``text`` and ``tool_use`` parts (a tool part already carries its result in
``state``), and a ``step_finish`` whose ``reason`` is ``tool-calls`` or, on the last one,
``stop``; an ``error`` line when the run fails. Its ``tokens`` and ``cost`` are not read: the
gateway meters every call.
"""

from __future__ import annotations

import json
from typing import Any

from shared.event_payloads import AgentOutputChunk, AgentToolCall, ToolExecuted
from shared.events import EventData
from shared.harnesses import HarnessConfig
from workers.claim import Claim
from workers.gateway.mcp_tools import SERVER_NAME
from workers.runners.cli import base, mcp_config
from workers.runners.cli.ending import RunEnd
from workers.runners.cli.tools import PREVIEW_CHARS, as_dict, json_line, our_tool_name


def invocation(claim: Claim, config: HarnessConfig, token: str, places: base.Places) -> base.Invocation:
    """``opencode run --format json`` on the Anthropic API through the relay.

    Its turn cap is its build agent's ``steps`` (past it the model is asked to wrap up), and the
    session is given its title, so no side-request is made (and charged) for one.
    """
    system, prompt = base.instructions(claim, places.workspace)
    model = config.model or claim.config.model
    settings: dict[str, object] = {
        "autoupdate": False,
        "share": "disabled",
        "model": f"anthropic/{model}",
        "small_model": f"anthropic/{model}",
        "provider": {"anthropic": {"options": {"baseURL": f"http://127.0.0.1:{places.relay_port}/v1"}}},
        "agent": {"build": {"steps": config.max_turns or claim.config.max_turns}},
    }
    if mcp_config.offered(claim):
        settings["mcp"] = mcp_config.opencode_entry(token, places.relay_port)
    if config.allowed_tools is not None:
        settings["tools"] = _opencode_tools(config.allowed_tools, mcp_config.offered(claim))
    title = f"{claim.project_name} iteration {claim.number}"
    argv = [places.binary, "run", "--format", "json", "--title", title, *config.args, f"{system}\n\n{prompt}"]
    relayed, relay_env = base.relayed(argv, places)
    env = {
        **base.quiet(places),
        **relay_env,
        "ANTHROPIC_API_KEY": token,
        "OPENCODE_CONFIG_CONTENT": json.dumps(settings),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    }
    return base.Invocation(relayed, env)


def _opencode_tools(allowed: list[str], coordination: bool) -> dict[str, bool]:
    """OpenCode's ``tools`` switches for an allow-list: every tool off, then the listed ones on
    (its rules are ordered, the last match wins), our memory tools too when offered. It turns them
    into permission rules itself (``write`` and ``patch`` are its ``edit`` permission, so either
    also allows ``edit``); a tool switched off is not offered to the model at all."""
    tools = {"*": False, **dict.fromkeys(allowed, True)}
    if coordination:
        tools[f"{SERVER_NAME}_*"] = True
    return tools


class OpenCodeParser:
    """Feed it stdout lines in order; it returns each line's events and keeps the run's end."""

    def __init__(self) -> None:
        self.end: RunEnd | None = None
        self._last_text = ""
        self._steps = 0

    def feed(self, line: str) -> list[EventData]:
        event = json_line(line)
        if event is None:
            return []  # not a JSON object (a warning the CLI printed): nothing to show
        kind = event.get("type")
        part = as_dict(event.get("part"))
        if kind == "text" and part.get("text"):
            self._last_text = str(part["text"])
            return [AgentOutputChunk(text=self._last_text)]
        if kind == "tool_use":
            return _tool(part)
        if kind == "step_finish":
            self._steps += 1
            reason = part.get("reason")
            if reason != "tool-calls":
                stopped = "completed" if reason == "stop" else str(reason or "completed")
                self.end = RunEnd(is_error=False, reason=stopped, text=self._last_text, turns=self._steps)
        elif kind == "error":
            error = event.get("error")
            message = json.dumps(error)[:1000] if not isinstance(error, str) else error[:1000]
            status = _status(error)
            self.end = RunEnd(
                is_error=True,
                reason="api_error" if status else "error",
                text=self._last_text,
                error=message,
                api_status=status,
                turns=self._steps,
            )
        return []


def _tool(part: dict[str, Any]) -> list[EventData]:
    state = as_dict(part.get("state"))
    name = our_tool_name(str(part.get("tool", "")))
    use_id = str(part.get("callID", ""))
    out: list[EventData] = [AgentToolCall(tool=name, input=state.get("input"), tool_use_id=use_id)]
    status = state.get("status")
    if status in ("completed", "error"):
        metadata = as_dict(state.get("metadata"))
        exit_code = metadata.get("exit")
        output = state.get("output") if status == "completed" else state.get("error")
        out.append(
            ToolExecuted(
                tool=name,
                tool_use_id=use_id,
                exit_code=exit_code if isinstance(exit_code, int) else None,
                is_error=status == "error",
                output=str(output or "")[:PREVIEW_CHARS],
            )
        )
    return out


def _status(error: Any) -> int | None:
    """The HTTP status of an API error OpenCode reports (``data.statusCode``), if it says."""
    data = error.get("data") if isinstance(error, dict) else None
    code = data.get("statusCode") if isinstance(data, dict) else None
    return code if isinstance(code, int) else None


CLI = base.Cli("opencode", invocation, OpenCodeParser, relayed=True)
