"""A threaded HTTP server on a free loopback port, for the fake servers the tests talk to (the
git server, the forge): started in a thread, shut down and its thread joined on leaving."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """GET and POST go to :meth:`_serve`; nothing is logged (each fake server records its requests)."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the stdlib's name
        """Quiet: the fake server keeps its own record of what it was asked."""

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        raise NotImplementedError


@contextmanager
def serve_loopback(handler: type[BaseHTTPRequestHandler], name: str, join_s: float = 10.0) -> Iterator[str]:
    """Serve ``handler`` on 127.0.0.1 at a free port; yields the server's base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(join_s)
