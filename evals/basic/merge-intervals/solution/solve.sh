#!/usr/bin/env bash
set -eu
cat > intervals.py <<'PY'
"""Interval arithmetic."""


def merge(intervals):
    """Merge overlapping closed intervals; the result is sorted by start."""
    result = []
    for start, end in sorted(intervals):
        if result and start <= result[-1][1]:
            result[-1] = (result[-1][0], max(result[-1][1], end))
        else:
            result.append((start, end))
    return result
PY
