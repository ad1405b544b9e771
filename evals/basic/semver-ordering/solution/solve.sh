#!/usr/bin/env bash
set -eu
cat > semver.py <<'PY'
"""Semantic versions."""

import re

_VERSION = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z.-]+)?$"
)


def parse(version):
    """A sort key of a version string, by SemVer 2.0.0 precedence."""
    match = _VERSION.match(version)
    if not match:
        raise ValueError(f"{version!r} is not a semantic version")
    major, minor, patch, pre = match.groups()
    if pre is None:
        pre_key = (1,)
    else:
        pre_key = (0, *((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split(".")))
    return (int(major), int(minor), int(patch), pre_key)


def newest(versions):
    """The highest of the given version strings."""
    return max(versions, key=parse)
PY
