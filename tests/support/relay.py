"""The gateway's relay (workers/gateway/relay.py) run on the host in front of a lease's socket, as
the runner starts it in a container: for the tests of what Codex, OpenCode and the MCP client
reach through it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from workers.gateway import GatewayLease
from workers.gateway import relay as relay_module


@contextmanager
def relay_on_host(lease: GatewayLease) -> Iterator[str]:
    """The relay listening on a free loopback port: its base URL (``http://127.0.0.1:PORT``)."""
    process = subprocess.Popen(
        [sys.executable, relay_module.__file__, "0", str(lease.socket_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert "listening" in line, line
        yield f"http://127.0.0.1:{line.rsplit(':', 1)[1].strip()}"
    finally:
        process.kill()
        process.wait()
        if process.stdout is not None:
            process.stdout.close()
