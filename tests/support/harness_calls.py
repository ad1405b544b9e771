"""How each agent CLI's model calls its tools, as a script for the scripted model must write them
(the recorded scripts in tests/fixtures/harnesses show these shapes): a file written, a command
run. Used by the harness fault tests and the chaos soak's harness projects."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HarnessCalls:
    """One CLI's tool shapes, and which request of a mixed load is its."""

    name: str
    write: Callable[[str, str], dict[str, Any]]
    run: Callable[[str], dict[str, Any]]
    wrote: str
    """Our name for its write tool, in the events."""
    offers: str | None
    """A tool only this CLI offers (a scripted-model variant's ``offers_tool``); None: OpenCode,
    whose tools are named as ours, told apart by coming after the others."""


def _tool(name: str, args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "name": name, "input": args}


def _codex_patch(path: str, content: str) -> dict[str, Any]:
    """Codex's freeform apply_patch tool: its input is the patch text, not an object."""
    added = "".join(f"+{line}\n" for line in content.splitlines())
    return _tool("apply_patch", f"*** Begin Patch\n*** Add File: {path}\n{added}*** End Patch\n")


HARNESS_CALLS = {
    "claude-code": HarnessCalls(
        "claude-code",
        write=lambda path, content: _tool("Write", {"file_path": f"/workspace/{path}", "content": content}),
        run=lambda command: _tool("Bash", {"command": command}),
        wrote="write",
        offers="Bash",
    ),
    "codex": HarnessCalls(
        "codex",
        write=_codex_patch,
        run=lambda command: _tool("exec_command", {"cmd": command, "yield_time_ms": 30000}),
        wrote="edit",
        offers="exec_command",
    ),
    "opencode": HarnessCalls(
        "opencode",
        write=lambda path, content: _tool("write", {"filePath": f"/workspace/{path}", "content": content}),
        run=lambda command: _tool("bash", {"command": command, "description": "Record the effect"}),
        wrote="write",
        offers=None,
    ),
}
