"""Servers on free loopback ports: a threaded HTTP server for the fake servers the tests talk to
(the git server, the forge), started in a thread and joined on leaving; and a real server run as
a child process (Redis, the S3 API), given a port and waited for until it accepts connections."""

from __future__ import annotations

import functools
import random
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


@functools.cache
def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A port of 127.0.0.1 free at this moment, and below the kernel's ephemeral range.

    Not port 0's pick: that comes from the ephemeral range, where every outgoing connection also
    takes its local port, so between the pick and the server's bind a test's own traffic (a stack
    starting: dozens of connections) could take it, and HAProxy's bind failed on it. Below the
    range, only another listener can, and one is seen here.
    """
    low = _ephemeral_low()
    if low > 12000:
        for _ in range(200):
            port = random.randrange(10000, low)
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def listening_process(
    command: Callable[[int], Sequence[str]], failure: str, start_within_s: float = 10.0
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """``command(port)`` on a free loopback port, yielded (port, process) once it accepts
    connections, terminated on leaving. ``failure`` ends the error when it exits or does not
    listen in time (what to do about it)."""
    port = free_port()
    proc = subprocess.Popen(list(command(port)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + start_within_s
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                msg = f"{command(port)[0]} on port {port} did not start: {failure}"
                raise RuntimeError(msg)
            time.sleep(0.05)
        yield port, proc
    finally:
        proc.terminate()
        proc.wait(timeout=10)


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
