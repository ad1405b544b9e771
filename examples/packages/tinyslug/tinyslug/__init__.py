"""tinyslug: the dependency examples/python-repo's tests need, served from a local index."""

import re

__version__ = "1.0"


def slugify(text: str) -> str:
    """Lower-case words joined by hyphens: "Hello, World!" -> "hello-world"."""
    return "-".join(re.findall(r"[a-z0-9]+", text.lower()))
