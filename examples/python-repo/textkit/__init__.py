"""textkit: small text helpers (the example project the agent works on)."""

from tinyslug import slugify


def title_slug(title: str, limit: int = 40) -> str:
    """The slug of ``title``, at most ``limit`` characters."""
    return slugify(title)[:limit]
