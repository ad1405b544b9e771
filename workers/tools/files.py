"""The file tools: ``read`` (numbered lines), ``write`` (whole file) and ``edit`` (one exact replacement)."""

from __future__ import annotations

from pydantic import Field

from shared.tool_names import EDIT, READ, WRITE
from workers.sandbox.base import Sandbox
from workers.tools.base import Tool, ToolArgs, ToolResult, WorkspacePath, error

DEFAULT_LINES = 2000
MAX_LINE_CHARS = 2000
MAX_READ_CHARS = 100_000


def _text(sandbox: Sandbox, tool: str, path: str) -> str | ToolResult:
    """The file decoded as UTF-8, or an error result for binary files."""
    data = sandbox.read_file(path)
    if b"\0" in data[:8192]:
        return error(f"{tool}: {path} is a binary file ({len(data)} bytes); inspect it with bash (e.g. xxd)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        return error(f"{tool}: {path} is not UTF-8 text ({e.reason} at byte {e.start}); use bash")


class ReadArgs(ToolArgs):
    path: WorkspacePath
    start_line: int | None = Field(default=None, ge=1, description="First line to show (1-based).")
    end_line: int | None = Field(default=None, ge=1, description="Last line to show (inclusive).")


class ReadTool(Tool[ReadArgs]):
    name = READ
    description = (
        "Read a UTF-8 text file of the workspace. Returns its lines numbered like `cat -n` "
        "(line number, a tab, the text), counting from 1. start_line and end_line (inclusive) "
        f"choose a range; without them the first {DEFAULT_LINES} lines are shown, and a note at "
        "the end says how many lines the file has when not all are shown. Lines longer than "
        f"{MAX_LINE_CHARS} characters are cut, and at most {MAX_READ_CHARS} characters are "
        "returned per call. Binary files are refused."
    )
    args_model = ReadArgs

    def invoke(self, sandbox: Sandbox, args: ReadArgs) -> ToolResult:
        text = _text(sandbox, self.name, args.path)
        if isinstance(text, ToolResult):
            return text
        lines = text.splitlines()
        if not lines:
            return ToolResult(content=f"({args.path} is empty)")
        start = args.start_line or 1
        end = args.end_line or (start + DEFAULT_LINES - 1 if args.start_line else DEFAULT_LINES)
        if start > len(lines):
            return error(f"read: start_line {start} is past the end of {args.path} ({len(lines)} lines)")
        if end < start:
            return error(f"read: end_line {end} is before start_line {start}")
        return ToolResult(content=_numbered(lines, start, min(end, len(lines))))


def _numbered(lines: list[str], start: int, end: int) -> str:
    out: list[str] = []
    size = 0
    for n in range(start, end + 1):
        line = lines[n - 1]
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + f" [line cut: {len(line) - MAX_LINE_CHARS} more characters]"
        size += len(line) + 8
        if size > MAX_READ_CHARS and out:
            out.append(f"[stopped at line {n - 1}: too much at once; continue with start_line={n}]")
            return "\n".join(out)
        out.append(f"{n:6}\t{line}")
    if start > 1 or end < len(lines):
        out.append(f"[lines {start}-{end} of {len(lines)}]")
    return "\n".join(out)


class WriteArgs(ToolArgs):
    path: WorkspacePath
    content: str = Field(description="The complete new contents.")


class WriteTool(Tool[WriteArgs]):
    name = WRITE
    description = (
        "Create a file of the workspace, or replace all of its contents, with exactly `content` "
        "(written as UTF-8). Missing parent directories are created. Returns the number of bytes "
        "written. To change part of an existing file, use edit."
    )
    args_model = WriteArgs

    def invoke(self, sandbox: Sandbox, args: WriteArgs) -> ToolResult:
        data = args.content.encode("utf-8")
        sandbox.write_file(args.path, data)
        return ToolResult(content=f"wrote {len(data)} bytes to {args.path}")


class EditArgs(ToolArgs):
    path: WorkspacePath
    old_text: str = Field(min_length=1, description="Exact text to replace.")
    new_text: str = Field(description="Text to put in its place.")


class EditTool(Tool[EditArgs]):
    name = EDIT
    description = (
        "Replace one exact occurrence of old_text with new_text in a UTF-8 file of the workspace. "
        "old_text must match the file exactly, whitespace and indentation included, and must "
        "occur exactly once; otherwise nothing is changed and the error says whether it was not "
        "found or how many times it occurs (then include more surrounding lines to make it "
        "unique). new_text may be empty to delete old_text."
    )
    args_model = EditArgs

    def invoke(self, sandbox: Sandbox, args: EditArgs) -> ToolResult:
        text = _text(sandbox, self.name, args.path)
        if isinstance(text, ToolResult):
            return text
        count = text.count(args.old_text)
        if count == 0:
            return error(
                f"edit: old_text was not found in {args.path}; read the file and copy the text exactly"
            )
        if count > 1:
            return error(
                f"edit: old_text occurs {count} times in {args.path}; include more context so it occurs once"
            )
        if args.old_text == args.new_text:
            return error("edit: new_text is the same as old_text; nothing to change")
        at = text.index(args.old_text)
        sandbox.write_file(args.path, text.replace(args.old_text, args.new_text, 1).encode("utf-8"))
        line = text.count("\n", 0, at) + 1
        return ToolResult(content=f"edited {args.path}: replaced 1 occurrence at line {line}")
