#!/usr/bin/env bash
set -eu
cat > text.py <<'PY'
"""Small text helpers."""

import re
import unicodedata


def slugify(title: str) -> str:
    """A URL slug for ``title``."""
    ascii_only = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", ascii_only.lower()).strip("-")
PY
