"""Claude Code: its command line (``-p`` with ``--output-format stream-json --verbose``, its
model calls straight to the gateway's socket) and its output lines, as the project's own events.

What it prints (checked against 2.1.330, see the fixtures in tests/fixtures/harnesses): a
``system/init`` line, one ``assistant`` line per content block (text or tool_use), ``user``
lines carrying tool results, ``system/api_retry`` lines while it retries a call, and a final
``result`` line. The usage in those lines is not read: the gateway meters every call from the
stream itself (a harness's own counts and cost are never the ledger).
"""

from __future__ import annotations

from typing import Any

from shared.event_payloads import AgentOutputChunk, AgentToolCall, LlmRetry, ToolExecuted
from shared.events import EventData
from shared.harnesses import HarnessConfig
from workers.claim import Claim
from workers.runners.cli import base, mcp_config
from workers.runners.cli.ending import RunEnd
from workers.runners.cli.tools import PREVIEW_CHARS, json_line, our_tool_name, result_text


def invocation(claim: Claim, config: HarnessConfig, token: str, places: base.Places) -> base.Invocation:
    system, prompt = base.instructions(claim, places.workspace)
    argv = [
        places.binary,
        "-p",
        prompt,
        "--append-system-prompt",
        system,
        "--output-format",
        "stream-json",
        "--verbose",
        # Its tools run in our sandbox: the container is the permission boundary.
        "--dangerously-skip-permissions",
        "--no-session-persistence",
        "--session-id",
        base.session_id(claim),
        "--max-turns",
        str(config.max_turns or claim.config.max_turns),
    ]
    if config.model:
        argv += ["--model", config.model]
    if config.allowed_tools is not None:
        argv += ["--allowedTools", ",".join(config.allowed_tools)]
    argv += config.args
    env = {
        **base.quiet(places),
        "ANTHROPIC_UNIX_SOCKET": places.socket,
        # Both are needed: with the socket alone it speaks TLS into it.
        "ANTHROPIC_BASE_URL": "http://localhost",
        "ANTHROPIC_API_KEY": token,
        "CLAUDE_CODE_MAX_RETRIES": str(base.MAX_RETRIES),
    }
    if not mcp_config.offered(claim):
        return base.Invocation(argv, env)
    # Its model calls use the socket; the memory tools (HTTP MCP, no socket) the relay.
    relayed, relay_env = base.relayed([*argv, *mcp_config.claude_code_args(token, places.relay_port)], places)
    return base.Invocation(relayed, {**env, **relay_env})


# Claude Code's terminal reasons, in the words the ending uses.
_REASONS = {"completed": "completed", "max_turns": "max_turns", "api_error": "api_error"}


class ClaudeParser:
    """Feed it stdout lines in order; it returns each line's events and keeps the run's end."""

    def __init__(self) -> None:
        self.end: RunEnd | None = None
        self._tools: dict[str, str] = {}  # tool_use_id -> tool name, for the results
        self._last_text = ""
        self._error: str | None = None
        self._api_status: int | None = None

    def feed(self, line: str) -> list[EventData]:
        event = json_line(line)
        if event is None:
            return []  # not a JSON object (a warning the CLI printed): nothing to show
        kind = event.get("type")
        if kind == "assistant":
            return self._assistant(event)
        if kind == "user":
            return self._results(event)
        if kind == "system" and event.get("subtype") == "api_retry":
            return [
                LlmRetry(
                    reason="api_retry",
                    error=str(event.get("error_status") or event.get("error") or "")[:300] or None,
                    attempt=_int(event.get("attempt")),
                    delay_s=round(float(event.get("retry_delay_ms") or 0) / 1000, 2),
                )
            ]
        if kind == "result":
            self._result(event)
        return []

    def _assistant(self, event: dict[str, Any]) -> list[EventData]:
        message = event.get("message") or {}
        if event.get("is_api_error_message") or message.get("model") == "<synthetic>":
            # The CLI's own words about a failed call, not the model's: they end the run.
            self._error = _text_of(message.get("content"))
            self._api_status = _int(event.get("api_error_status"))
            return []
        out: list[EventData] = []
        for block in message.get("content") or []:
            if block.get("type") == "text" and block.get("text"):
                self._last_text = block["text"]
                out.append(AgentOutputChunk(text=block["text"]))
            elif block.get("type") == "tool_use":
                use_id, name = str(block.get("id", "")), str(block.get("name", ""))
                self._tools[use_id] = name
                out.append(
                    AgentToolCall(tool=our_tool_name(name), input=block.get("input"), tool_use_id=use_id)
                )
        return out

    def _results(self, event: dict[str, Any]) -> list[EventData]:
        content = (event.get("message") or {}).get("content")
        out: list[EventData] = []
        for block in content if isinstance(content, list) else []:
            if not isinstance(block, dict) or block.get("type") != "tool_result":
                continue
            use_id = str(block.get("tool_use_id", ""))
            out.append(
                ToolExecuted(
                    tool=our_tool_name(self._tools.get(use_id, "unknown")),
                    tool_use_id=use_id,
                    is_error=bool(block.get("is_error")),
                    output=result_text(block.get("content"))[:PREVIEW_CHARS],
                )
            )
        return out

    def _result(self, event: dict[str, Any]) -> None:
        reason = str(event.get("terminal_reason") or "")
        if not reason and event.get("subtype") == "error_max_turns":
            reason = "max_turns"
        errors = event.get("errors")
        text = event.get("result") if isinstance(event.get("result"), str) else None
        is_error = bool(event.get("is_error"))
        error = "; ".join(map(str, errors)) if isinstance(errors, list) and errors else None
        if is_error and error is None:
            error = text or self._error
        self.end = RunEnd(
            is_error=is_error,
            reason=_REASONS.get(reason, reason or None),
            text=self._last_text if is_error else (text or self._last_text),
            error=error,
            api_status=_int(event.get("api_error_status")) or self._api_status,
            turns=_int(event.get("num_turns")) or 0,
        )


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text_of(content: Any) -> str:
    return result_text(content)


CLI = base.Cli("claude-code", invocation, ClaudeParser, relayed=False)
