"""Static files: served under a path named for their content, so browsers may keep them a year.

Templates ask for ``static("js/project.js")``; the path changes whenever any file does. The
vendored libraries are listed in ``static/vendor/README.md``.
"""

from __future__ import annotations

import hashlib
from functools import cache
from pathlib import Path

from starlette.staticfiles import StaticFiles
from starlette.types import Message, Receive, Scope, Send

STATIC_DIR = Path(__file__).resolve().parent / "static"
CACHE_FOREVER = "public, max-age=31536000, immutable"

# The libraries the pages load, by name (see static/vendor/README.md).
VENDOR = {
    "htmx": "vendor/htmx-2.0.11/htmx.min.js",
    "htmx_sse": "vendor/htmx-ext-sse-2.2.4/sse.min.js",
    "cytoscape": "vendor/cytoscape-3.34.4/cytoscape.min.js",
    "dagre": "vendor/dagre-0.8.5/dagre.min.js",
    "cytoscape_dagre": "vendor/cytoscape-dagre-2.5.0/cytoscape-dagre.js",
    "uplot": "vendor/uplot-1.6.32/uPlot.iife.min.js",
    "uplot_css": "vendor/uplot-1.6.32/uPlot.min.css",
}


@cache
def version() -> str:
    """A digest of every static file's path and bytes."""
    digest = hashlib.sha256()
    for path in sorted(STATIC_DIR.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(STATIC_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def prefix() -> str:
    return f"/static/{version()}"


def static_url(name: str) -> str:
    return f"{prefix()}/{VENDOR.get(name, name)}"


class VersionedStatic(StaticFiles):
    """StaticFiles with a year of caching: the path changes when the content does."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_cached(message: Message) -> None:
            if message["type"] == "http.response.start" and message.get("status") == 200:
                message.setdefault("headers", [])
                message["headers"] = [
                    *[(k, v) for k, v in message["headers"] if k.lower() != b"cache-control"],
                    (b"cache-control", CACHE_FOREVER.encode()),
                ]
            await send(message)

        await super().__call__(scope, receive, send_cached)
