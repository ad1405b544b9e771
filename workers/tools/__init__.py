"""The agent's tools, in the Anthropic tool format, run against a :class:`~workers.sandbox.base.Sandbox`.

``tool_specs(names)`` is what goes in the ``tools=`` parameter; ``execute(sandbox, name, args)``
runs one ``tool_use`` block and always returns a :class:`ToolResult`: a model's mistake (an
unknown tool, bad arguments, a path outside the workspace) or a sandbox failure becomes an
error result the model can read, never an exception that ends the iteration.

May import ``workers.sandbox`` (and ``workers.claim``) below it, and ``shared``; never ``llm``,
``records``, ``ledger`` (its siblings) or anything above it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from shared.errors import InvalidInput, SandboxError, ToolTimeout
from shared.tool_names import SANDBOX_TOOLS
from workers.sandbox.base import Sandbox
from workers.tools.base import Tool, ToolResult, error
from workers.tools.bash import BashTool
from workers.tools.files import EditTool, ReadTool, WriteTool
from workers.tools.search import GlobTool, GrepTool

log = logging.getLogger(__name__)

TOOLS: dict[str, Tool[Any]] = {
    tool.name: tool for tool in (BashTool(), ReadTool(), WriteTool(), EditTool(), GlobTool(), GrepTool())
}
#: The sandbox tools' names, as shared.tool_names spells them (each tool's ``name`` is one of them).
TOOL_NAMES = SANDBOX_TOOLS

__all__ = ["TOOLS", "TOOL_NAMES", "Tool", "ToolResult", "execute", "tool_specs"]


def tool_specs(names: Iterable[str]) -> list[dict[str, Any]]:
    """The specs of the named tools, in the given order; a name we do not have is a config error."""
    specs = []
    for name in names:
        if name not in TOOLS:
            msg = f"unknown tool {name!r}; the tools are: {', '.join(TOOL_NAMES)}"
            raise InvalidInput(msg)
        specs.append(TOOLS[name].spec())
    return specs


def execute(sandbox: Sandbox, name: str, args: object, *, denylist: Sequence[str] = ()) -> ToolResult:
    """Run one tool call from the model; failures come back as ``is_error`` results."""
    tool = TOOLS.get(name)
    if tool is None:
        return error(f"unknown tool {name!r}; the tools are: {', '.join(TOOL_NAMES)}")
    if not isinstance(args, dict):
        return error(f"{name}: the arguments must be a JSON object, not {type(args).__name__}")
    try:
        return tool.with_policy(denylist).run(sandbox, args)
    except InvalidInput as e:  # PathOutsideWorkspace among them
        return error(f"{name}: {e}")
    except ToolTimeout as e:
        return error(f"{name}: {e}")
    except SandboxError as e:
        log.warning("tool %s failed in the sandbox: %s", name, e)
        return error(f"{name}: the sandbox failed: {e}")
    except OSError as e:
        where = f": {e.filename}" if e.filename else ""
        return error(f"{name}: {e.strerror or e}{where}")
