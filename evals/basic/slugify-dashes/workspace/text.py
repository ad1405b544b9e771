"""Small text helpers."""

import re


def slugify(title: str) -> str:
    """A URL slug for ``title``."""
    return re.sub(r"[^a-z0-9]", "-", title.lower())
