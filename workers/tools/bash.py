"""The ``bash`` tool: one command in the sandbox, its exit code and capped output."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

from pydantic import Field

from shared.tool_names import BASH
from workers.sandbox.base import Sandbox
from workers.tools.base import Tool, ToolArgs, ToolResult, error

log = logging.getLogger(__name__)


class BashArgs(ToolArgs):
    command: str = Field(min_length=1, description="The bash command line to run.")
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description="Seconds before the command is killed; capped at the project's timeout.",
    )


class BashTool(Tool[BashArgs]):
    name = BASH
    description = (
        "Run a command with `bash -c` in the workspace directory of the sandbox and return "
        "'exit code N' followed by its combined stdout and stderr. Each call is a fresh shell: "
        "the working directory, variables and background processes do not carry over (anything "
        "still running when the command returns is killed). The network is off unless the "
        "project allows it. Output longer than the project's limit (30000 bytes by default) is "
        "cut from the middle, leaving a note '[output truncated: N bytes cut]'. The command and "
        "everything it started are killed after timeout_s seconds; the default, which is also "
        "the maximum, is the project's command timeout (120 s unless configured). Commands "
        "matching the project's denylist are refused. Use the read, write, edit, glob and grep "
        "tools for files rather than cat, sed or find."
    )
    args_model = BashArgs

    def __init__(self, denylist: Sequence[str] = ()) -> None:
        self.denylist = tuple(denylist)

    def with_policy(self, denylist: Sequence[str]) -> BashTool:
        return BashTool(denylist)

    def invoke(self, sandbox: Sandbox, args: BashArgs) -> ToolResult:
        refused_by = denied(args.command, self.denylist)
        if refused_by is not None:
            log.info("bash command refused by denylist entry %r", refused_by)
            return error(f"bash: the project's denylist refuses this command (it matches {refused_by!r})")
        limit = sandbox.limits.command_timeout_s
        timeout = min(args.timeout_s, limit) if args.timeout_s is not None else limit
        result = sandbox.run(args.command, timeout_s=timeout)
        if result.timed_out:
            note = f"timed out after {timeout:g} s; the command and everything it started were killed"
            return error(f"{note}\n{result.output}".rstrip("\n"))
        return ToolResult(content=f"exit code {result.exit_code}\n{result.output}".rstrip("\n"))


def denied(command: str, denylist: Sequence[str]) -> str | None:
    """The first denylist entry the command matches, as a regex or (failing that) a substring.

    A second line of defence only: the sandbox is what contains a command.
    """
    for entry in denylist:
        if entry in command:
            return entry
        try:
            if re.search(entry, command):
                return entry
        except re.error:
            continue
    return None
