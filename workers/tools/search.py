"""The search tools: ``glob`` (paths by pattern) and ``grep`` (contents by regex, via ripgrep)."""

from __future__ import annotations

from pydantic import Field

from shared.tool_names import GLOB, GREP
from workers.sandbox.base import Sandbox
from workers.sandbox.helper import GLOB_LIMIT
from workers.tools.base import Tool, ToolArgs, ToolResult, error


class GlobArgs(ToolArgs):
    pattern: str = Field(min_length=1, description="Glob pattern relative to the workspace root.")


class GlobTool(Tool[GlobArgs]):
    name = GLOB
    description = (
        "List the paths of the workspace that match a glob pattern, sorted, relative to the "
        "workspace root, one per line. `*` and `?` match within one path segment, `[abc]` is a "
        "character class, `**` matches any number of directories (e.g. `src/**/*.py`). As in "
        "bash, wildcards do not match names starting with a dot unless the pattern spells the "
        "dot; .git is not searched unless named; symbolic links are listed but not followed. "
        f"At most {GLOB_LIMIT} paths are returned."
    )
    args_model = GlobArgs

    def invoke(self, sandbox: Sandbox, args: GlobArgs) -> ToolResult:
        paths = sandbox.list_glob(args.pattern)
        if not paths:
            return ToolResult(content=f"no paths match {args.pattern}")
        note = f"\n[first {GLOB_LIMIT} paths shown; narrow the pattern]" if len(paths) >= GLOB_LIMIT else ""
        return ToolResult(content="\n".join(paths) + note)


class GrepArgs(ToolArgs):
    pattern: str = Field(min_length=1, description="Regular expression to search for.")
    path: str = Field(
        default=".", min_length=1, description="File or directory to search; default the workspace root."
    )
    glob: str | None = Field(default=None, min_length=1, description="Only search files matching this glob.")
    ignore_case: bool = Field(default=False, description="Case-insensitive search (default false).")


class GrepTool(Tool[GrepArgs]):
    name = GREP
    description = (
        "Search file contents with ripgrep. `pattern` is a regular expression (Rust regex "
        "syntax); `path` is the file or directory to search (default: the workspace root); "
        "`glob` keeps only matching files (e.g. `*.py`, or `!*.min.js` to exclude); "
        "`ignore_case` makes the search case-insensitive. Returns one `path:line:text` line per "
        "match, line numbers from 1. Files ignored by .gitignore, hidden files and binary files "
        "are skipped; lines longer than 400 characters are shortened; output beyond the "
        "project's limit is cut with a note '[output truncated: N bytes cut]'."
    )
    args_model = GrepArgs

    def invoke(self, sandbox: Sandbox, args: GrepArgs) -> ToolResult:
        result = sandbox.grep(args.pattern, path=args.path, glob=args.glob, ignore_case=args.ignore_case)
        if result.timed_out:
            return error("grep: the search timed out; search a smaller path or use a narrower glob")
        if result.exit_code == 1 and not result.output.strip():
            return ToolResult(content=f"no matches for {args.pattern!r}")
        if result.exit_code not in (0, 1):
            return error(f"grep: {result.output.strip() or f'ripgrep failed (exit {result.exit_code})'}")
        return ToolResult(content=result.output.rstrip("\n"))
