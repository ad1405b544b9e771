"""The cell syntax of the scg transcript format: escaping, splitting a line into cells, and
reading and writing the typed cells (numbers, times, usage, JSON). See docs/transcript-scg.md.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any, TypeVar

from shared.usage import Usage

#: A cell starting with one of these means None (~), a reference (^) or "as in the header" (=).
MARKERS = "~^="
E = TypeVar("E", bound=Enum)
_TO_ESCAPE = re.compile("[\\\\|\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
_SHORT = {"\\": "\\\\", "|": "\\|", "\n": "\\n", "\r": "\\r"}
_UNESCAPE = {"\\": "\\", "|": "|", "n": "\n", "r": "\r", "s": " ", "~": "~", "^": "^", "=": "="}
_ESCAPE_SEQ = re.compile(r"\\(?:u([0-9a-fA-F]{4})|(.)|$)")
_CELL = re.compile(r"(?:[^\\|]+|\\.)*")
_INT = re.compile(r"-?\d+")
_OFFSET = re.compile(r"(-?)(\d+)(?:\.(\d{1,6}))?")
_MICRO = timedelta(microseconds=1)


class BadCell(ValueError):
    """A cell or a line is wrong; the parser says where.

    A local control-flow signal: the parser turns it into ``ScgError`` with the file and line.
    """


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise BadCell(message)


def escape(text: str, *, space: bool = False) -> str:
    out = _TO_ESCAPE.sub(lambda m: _SHORT.get(m.group()) or f"\\u{ord(m.group()):04x}", text)
    if space:
        out = out.replace(" ", "\\s")
    return "\\" + out if out and out[0] in MARKERS else out


def unescape(raw: str) -> str:
    first = raw[:1]
    expect(
        not first or first not in MARKERS,
        f"unexpected {first!r} at the start of {raw[:20]!r} (\\{first} is the character)",
    )

    def one(match: re.Match[str]) -> str:
        if match.group(1):
            return chr(int(match.group(1), 16))
        char = match.group(2)
        if char is None or char not in _UNESCAPE:
            msg = f"unknown escape {match.group()!r}"
            raise BadCell(msg)
        return _UNESCAPE[char]

    return _ESCAPE_SEQ.sub(one, raw) if "\\" in raw else raw


def split_cells(line: str) -> list[str]:
    """A line's cells, split on the pipes that are not escaped; escapes are kept."""
    cells, pos = [], 0
    while True:
        match = _CELL.match(line, pos)
        assert match is not None  # the pattern matches the empty string
        cells.append(match.group())
        pos = match.end()
        if pos == len(line):
            return cells
        expect(line[pos] == "|", "the line ends with a lone backslash")
        pos += 1


def opt(value: str | None, *, space: bool = False) -> str:
    return "~" if value is None else escape(value, space=space)


def read_opt(raw: str) -> str | None:
    return None if raw == "~" else unescape(raw)


def read_int(raw: str, what: str) -> int:
    expect(_INT.fullmatch(raw) is not None, f"{what} {raw!r} is not a whole number")
    return int(raw)


def read_float(raw: str, what: str) -> float:
    try:
        if raw.strip() != raw:
            raise ValueError(raw)
        return float(raw)
    except ValueError as exc:
        msg = f"{what} {raw!r} is not a number"
        raise BadCell(msg) from exc


def read_decimal(raw: str, what: str) -> Decimal:
    try:
        value = Decimal(raw)
    except InvalidOperation as exc:
        msg = f"{what} {raw!r} is not an amount"
        raise BadCell(msg) from exc
    expect(value.is_finite(), f"{what} {raw!r} is not a finite amount")
    return value


def read_datetime(raw: str, what: str) -> datetime:
    try:
        value = datetime.fromisoformat(unescape(raw))
    except ValueError as exc:
        msg = f"{what} {raw!r} is not an ISO 8601 time"
        raise BadCell(msg) from exc
    expect(value.tzinfo is not None, f"{what} {raw!r} has no UTC offset")
    return value


def read_json(raw: str, what: str) -> dict[str, Any]:
    try:
        value = json.loads(unescape(raw))
    except json.JSONDecodeError as exc:
        msg = f"{what} is not JSON ({exc})"
        raise BadCell(msg) from exc
    if not isinstance(value, dict):
        msg = f"{what} is not a JSON object"
        raise BadCell(msg)
    return value


def dump_json(value: dict[str, Any]) -> str:
    return escape(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def offset(delta: timedelta) -> str:
    micros = delta // _MICRO
    sign, micros = ("-" if micros < 0 else ""), abs(micros)
    whole, frac = divmod(micros, 1_000_000)
    return f"{sign}{whole}.{frac:06d}".rstrip("0").rstrip(".")


def read_offset(raw: str) -> timedelta:
    match = _OFFSET.fullmatch(raw)
    if match is None:
        msg = f"time {raw!r} is not seconds after the project's creation (e.g. 12.5)"
        raise BadCell(msg)
    sign, whole, frac = match.groups()
    micros = int(whole) * 1_000_000 + int((frac or "").ljust(6, "0"))
    return _MICRO * (-micros if sign else micros)


def usage_cell(usage: Usage | None) -> str:
    if usage is None:
        return "~"
    counts = usage.counts()
    while counts and counts[-1] == 0:
        counts.pop()
    return ",".join(map(str, counts))


def read_usage(raw: str) -> Usage | None:
    if raw == "~":
        return None
    counts = [read_int(part, "usage count") for part in raw.split(",")] if raw else []
    expect(len(counts) <= 4, f"usage {raw!r} has more than four counts (in,out,cache_write,cache_read)")
    expect(all(count >= 0 for count in counts), f"usage {raw!r} has a negative count")
    return Usage.from_counts(counts)


def number_cell(value: int | float | Decimal | None) -> str:
    if value is None:
        return "~"
    return repr(value) if isinstance(value, float) else str(value)


def read_enum(kind: type[E], raw: str) -> E:
    try:
        return kind(raw)
    except ValueError as exc:
        msg = f"status {raw!r} is not one of {', '.join(s.value for s in kind)}"
        raise BadCell(msg) from exc
