"""What the parsers share: the agent CLIs' tool names in ours, and tool results as text.

The CLIs name their tools their own way (Claude Code ``Bash``/``Write``, OpenCode ``bash``/``write``,
Codex a ``command_execution`` item); the events carry our names where there is one, so the graph,
``raas follow`` and the transcripts read the same whatever the harness. Other tools (Claude
Code's ``Task``, ``WebFetch``...) keep their own names.
"""

from __future__ import annotations

import json
from typing import Any

PREVIEW_CHARS = 2000  # as the api harness's tool_executed previews

_OURS = {
    "bash": "bash",
    "shell": "bash",
    "command_execution": "bash",
    "read": "read",
    "write": "write",
    "edit": "edit",
    "multiedit": "edit",
    "glob": "glob",
    "grep": "grep",
}


def our_tool_name(name: str) -> str:
    """Our name for a CLI's tool (``Bash`` -> ``bash``); its own name when we have none."""
    return _OURS.get(name.lower(), name)


def result_text(content: Any) -> str:
    """A tool result's content as text: a string, or the text of its blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "\n".join(p for p in parts if isinstance(p, str))
    return "" if content is None else str(content)


def json_line(line: str) -> dict[str, Any] | None:
    """The JSON object on a CLI's stdout line, or None for anything else (a warning it printed)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a CLI's line may lack a field)."""
    return value if isinstance(value, dict) else {}
