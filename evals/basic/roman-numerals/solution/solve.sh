#!/usr/bin/env bash
set -eu
cat > roman.py <<'PY'
"""Roman numerals."""

_VALUES = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]


def to_roman(n: int) -> str:
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 3999:
        raise ValueError(f"{n!r} is not an integer from 1 to 3999")
    out = []
    for value, symbol in _VALUES:
        count, n = divmod(n, value)
        out.append(symbol * count)
    return "".join(out)


_CANONICAL = {to_roman(n): n for n in range(1, 4000)}


def from_roman(s: str) -> int:
    try:
        return _CANONICAL[s]
    except (KeyError, TypeError):
        raise ValueError(f"{s!r} is not a canonical Roman numeral") from None
PY
