#!/usr/bin/env bash
set -eu
cat > csvline.py <<'PY'
"""A one-line CSV parser (no csv module on the embedded target)."""


def parse_line(line: str) -> list[str]:
    """The fields of one CSV line."""
    fields, current, i, quoted = [], [], 0, False
    while i < len(line):
        char = line[i]
        if quoted:
            if char == '"' and line[i + 1 : i + 2] == '"':
                current.append('"')
                i += 1
            elif char == '"':
                quoted = False
            else:
                current.append(char)
        elif char == '"':
            quoted = True
        elif char == ",":
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    if quoted:
        raise ValueError("unterminated quoted field")
    fields.append("".join(current))
    return fields
PY
