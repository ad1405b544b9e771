"""The layout of an scg file: its first and last lines, its sections in order, the legend under
each, and the keys of its header (docs/transcript-scg.md)."""

from __future__ import annotations

from typing import Literal

MAGIC = "#TRANSCRIPT"
VERSION = "v1"
END = "#END"
SECTIONS = ("@agents", "@messages", "@subagents", "@memory", "@mail", "@metrics")
# Written only when the transcript has any; files from before the memory bank have neither.
OPTIONAL = frozenset({"@memory", "@mail"})
LEGENDS = (
    "# i|id|category|depth|parent|status|task|iterations|failed_iterations",
    "# n|t|role|agent|iteration|attempt|model|stop|usage|cost_usd|duration_s|blocks…"
    "  (T|text  U|id|name|input  R|id|error|content  X|json)",
    "# agent|iteration|prompt|report",
    "# t|agent|iteration|key|version|conflict|tags|value",
    "# t|sender|iteration|broadcast|to|text  (sender and to: agent ids)",
    "# key=value",
)
METRICS = SECTIONS.index("@metrics")
HEADER_KEYS = ("project", "name", "status", "reason", "model", "created", "started", "finished")
ROLES: dict[str, Literal["user", "assistant"]] = {"u": "user", "a": "assistant"}
