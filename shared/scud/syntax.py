"""The row syntax reader and writer share: `|`-separated cells, escapes, the opaque sections."""

from __future__ import annotations

import re

_OPAQUE = {  # sections scud writes for its own coordination; kept and written back, not used
    "roles": "# role_id | name | allow_pattern | deny_pattern",
    "weave": "# id | name | priority | enabled | rule_type | rule_spec",
    "partitions": "# partition_id | scope_pattern | strategy | agent_count",
    "locks": "# lock_key | holder_agent | task_id | acquired_at | ttl_secs",
}
_ESCAPES = {"\\": "\\", "|": "|", "n": "\n"}


def _split(line: str) -> list[str]:
    """Split a row on `|`, keeping escaped `\\|` and `\\\\` inside their cell, unstripped."""
    cells, current = [], ""
    chars = iter(line)
    for char in chars:
        if char == "\\":
            current += char + next(chars, "")
        elif char == "|":
            cells.append(current)
            current = ""
        else:
            current += char
    return [*cells, current]


def _unescape(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(0)), text)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", "\\n")
