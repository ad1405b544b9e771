"""Which session a request belongs to, and which requests are side-requests outside the script.

The script cursor is kept per session so that many clients walk the script independently. Each
client names its session differently, so the key is the first of (checked against the real
clients, see ``tests/fixtures/harnesses/README.md``):

1. the ``x-raas-session`` header: the LLM gateway adds it with the project id, so the iterations
   of one project continue one script whatever the harness;
2. the header each harness sends natively: Claude Code's ``x-claude-code-session-id`` (the
   ``--session-id`` it was given), Codex's ``session-id`` (its thread id), OpenCode's
   ``x-session-id`` (``ses_…``);
3. ``metadata.user_id`` of a Messages request: Claude Code puts a JSON string there whose
   ``session_id`` is used; any other string (the api harness sends the project id) is used as is;
4. ``"default"``.

OpenCode first asks its small model for a title for the conversation. That request is answered
with a fixed title and does not take a turn of the script, so a script is written for the work
only, whichever harness walks it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

DEFAULT_SESSION = "default"
SESSION_HEADER = "x-raas-session"
_NATIVE_HEADERS = ("x-claude-code-session-id", "session-id", "x-session-id")
TITLE = "Scripted session"
"""The title every title side-request gets."""
_TITLE_PROMPT = "you are a title generator"


def session_key(headers: Mapping[str, str], body: Any) -> str:
    """The session a request belongs to (see the module docstring for the order)."""
    for name in (SESSION_HEADER, *_NATIVE_HEADERS):
        value = headers.get(name, "").strip()
        if value:
            return value
    metadata = body.get("metadata") if isinstance(body, dict) else None
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if not isinstance(user_id, str) or not user_id:
        return DEFAULT_SESSION
    return _embedded_session(user_id) or user_id


def _embedded_session(user_id: str) -> str | None:
    # Claude Code: '{"device_id": "...", "account_uuid": "", "session_id": "<uuid>"}'.
    if not user_id.startswith("{"):
        return None
    try:
        parsed = json.loads(user_id)
    except ValueError:
        return None
    session = parsed.get("session_id") if isinstance(parsed, dict) else None
    return session if isinstance(session, str) and session else None


def is_title_request(body: Any) -> bool:
    """Whether a Messages request is a harness asking for a conversation title (OpenCode does so
    with its small model before the first turn): no tools, and a system prompt that says it is a
    title generator."""
    if not isinstance(body, dict) or body.get("tools"):
        return False
    return _TITLE_PROMPT in _system_text(body.get("system")).lower()


def _system_text(system: Any) -> str:
    # A string, or blocks of text (Messages ``text``, Responses ``input_text``).
    if isinstance(system, str):
        return system
    if isinstance(system, list):
        return "\n".join(
            block["text"]
            for block in system
            if isinstance(block, dict) and isinstance(block.get("text"), str)
        )
    return ""


def prompt_text(body: Any) -> str:
    """The request's instructions as a variant's ``prompt_contains`` searches them: the system
    prompt (Messages ``system``, Responses ``instructions``) and the first user message."""
    if not isinstance(body, dict):
        return ""
    parts = [_system_text(body.get("system")), _system_text(body.get("instructions"))]
    turns = body.get("messages") if "messages" in body else body.get("input")
    if isinstance(turns, str):
        parts.append(turns)
    elif isinstance(turns, list):
        first = next((t for t in turns if isinstance(t, dict) and t.get("role") == "user"), None)
        content = first.get("content") if first is not None else None
        parts.append(content if isinstance(content, str) else _system_text(content))
    return "\n".join(parts)


def offered_tools(body: Any) -> set[str]:
    """The names of the tools a request offers (Messages and Responses alike)."""
    tools = body.get("tools") if isinstance(body, dict) else None
    if not isinstance(tools, list):
        return set()
    return {t["name"] for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)}
